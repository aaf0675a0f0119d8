#!/usr/bin/env python3
"""Dump a GGUF file with gguf-py's GGUFReader as JSON, in the schema of
`gguf inspect --json --full` (what `cargo xtask verify gguf` compares against).

Usage: gguf_dump.py IN.gguf OUT.json [IN.gguf OUT.json ...]

Values are rebuilt from the reader's raw parts (not ReaderField.contents(), which
flattens arrays of arrays), strings are decoded as UTF-8 with replacement characters,
and non-finite floats, which JSON lacks, are written as "nan", "inf" and "-inf".
"""
import json
import math
import os
import sys

import gguf
import numpy as np
from gguf import GGUFReader, GGUFValueType

NAMES = {
    GGUFValueType.UINT8: "u8",
    GGUFValueType.INT8: "i8",
    GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16",
    GGUFValueType.UINT32: "u32",
    GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32",
    GGUFValueType.BOOL: "bool",
    GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array",
    GGUFValueType.UINT64: "u64",
    GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}
FLOATS = (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64)


def num(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def walk(parts, i, t):
    """Decodes one value of type t starting at parts[i]; returns (value, next index)."""
    t = GGUFValueType(t)
    if t == GGUFValueType.STRING:
        return bytes(parts[i + 1]).decode("utf-8", errors="replace"), i + 2
    if t == GGUFValueType.ARRAY:
        et = int(parts[i][0])
        n = int(parts[i + 1][0])
        i += 2
        if n and et not in (GGUFValueType.STRING, GGUFValueType.ARRAY):
            # one part per scalar element: convert them in one go
            flat = np.concatenate(parts[i:i + n])
            if et in FLOATS:
                items = [num(x) for x in flat.astype(np.float64).tolist()]
            elif et == GGUFValueType.BOOL:
                items = [bool(x) for x in flat.tolist()]
            else:
                items = [int(x) for x in flat.tolist()]
            return items, i + n
        items = []
        for _ in range(n):
            v, i = walk(parts, i, et)
            items.append(v)
        return items, i
    x = parts[i][0]
    if t in FLOATS:
        return num(float(x)), i + 1
    if t == GGUFValueType.BOOL:
        return bool(x), i + 1
    return int(x), i + 1


def dump(path):
    r = GGUFReader(path, "r")
    metadata = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header
        t = int(field.parts[2][0])
        value, _ = walk(field.parts, 3, t)
        entry = {"key": name, "type": NAMES[GGUFValueType(t)]}
        if t == GGUFValueType.ARRAY:
            entry["element_type"] = NAMES[GGUFValueType(int(field.parts[3][0]))]
        entry["value"] = value
        metadata.append(entry)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "type_id": int(t.tensor_type),
            "shape": [int(d) for d in t.shape],
            "offset": int(t.data_offset - r.data_offset),
            "bytes": int(t.n_bytes),
        })
    return {
        "path": path,
        "reader": os.path.dirname(gguf.__file__),
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "file_size": os.path.getsize(path),
        "data_offset": int(r.data_offset),
        "metadata": metadata,
        "tensors": tensors,
    }


def main(argv):
    if len(argv) < 2 or len(argv) % 2:
        sys.exit(__doc__)
    for src, out in zip(argv[0::2], argv[1::2]):
        with open(out, "w", encoding="utf-8") as f:
            json.dump(dump(src), f, ensure_ascii=False, allow_nan=False)


if __name__ == "__main__":
    main(sys.argv[1:])
