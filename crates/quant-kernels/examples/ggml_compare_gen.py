# Writes ggml-cpu reference data for examples/ggml_compare.rs: python3 ggml_compare_gen.py OUTDIR
# (needs numpy and the llama.cpp build in ~/.cache/gguf-engine/llama.cpp-build).
# Run ggml_compare under the GGUF_CPU_FEATURES level the build was compiled for.
import ctypes, numpy as np, os, sys
# Another build of the same source (an AVX2-only one, say): GGML_COMPARE_BUILD=DIR (its bin/).
B = os.path.join(os.path.expanduser(os.environ.get("GGML_COMPARE_BUILD", "~/.cache/gguf-engine/llama.cpp-build")), "bin/")
base = ctypes.CDLL(B + "libggml-base.so", mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(B + "libggml-cpu.so", mode=ctypes.RTLD_GLOBAL)
cpu.ggml_cpu_init.restype = None
cpu.ggml_cpu_init()
FROM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
class Traits(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]
cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
base.ggml_row_size.restype = ctypes.c_size_t
base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
base.ggml_quantize_chunk.restype = ctypes.c_size_t
base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
types = {"f32":0,"f16":1,"q4_0":2,"q4_1":3,"q5_0":6,"q5_1":7,"q8_0":8,"q2_K":10,"q3_K":11,"q4_K":12,"q5_K":13,"q6_K":14,"bf16":30,
         "tq1_0":34,"tq2_0":35}
# Only these types (a comma list), e.g. GGML_COMPARE_TYPES=tq1_0,tq2_0.
if os.environ.get("GGML_COMPARE_TYPES"):
    types = {k: v for k, v in types.items() if k in os.environ["GGML_COMPARE_TYPES"].split(",")}
rng = np.random.default_rng(7)
out = sys.argv[1]
rows = 64
for name, tid in types.items():
    cols = 768 if "K" in name or name.startswith("tq") else 576
    W = (rng.standard_normal((rows, cols)) * 0.5).astype(np.float32)
    W[3] *= 30.0
    x = (rng.standard_normal(cols) * 2.0).astype(np.float32)
    x[5] = 17.0
    rs = base.ggml_row_size(tid, cols)
    wq = np.zeros(rows * rs, dtype=np.uint8)
    if tid == 0:
        wq = W.tobytes(); wq = np.frombuffer(wq, dtype=np.uint8).copy()
    else:
        base.ggml_quantize_chunk(tid, W.ctypes.data, wq.ctypes.data, 0, rows, cols, None)
    tr = cpu.ggml_get_type_traits_cpu(tid).contents
    vdt = tr.vec_dot_type
    xrs = base.ggml_row_size(vdt, cols)
    xq = np.zeros(xrs, dtype=np.uint8)
    ff = cpu.ggml_get_type_traits_cpu(vdt).contents.from_float
    FROM(ff)(x.ctypes.data, xq.ctypes.data, cols)
    dots = np.zeros(rows, dtype=np.float32)
    vd = DOT(tr.vec_dot)
    s = ctypes.c_float()
    for r in range(rows):
        vd(cols, ctypes.byref(s), 0, wq.ctypes.data + r * rs, 0, xq.ctypes.data, 0, 1)
        dots[r] = s.value
    d = f"{out}/{name}"
    os.makedirs(d, exist_ok=True)
    open(d + "/meta", "w").write(f"{tid} {rows} {cols} {vdt}\n")
    wq.tofile(d + "/w.bin"); x.tofile(d + "/x.bin"); xq.tofile(d + "/xq.bin"); dots.tofile(d + "/dots.bin")
    print(name, "vec_dot_type", vdt, "nrows", tr.nrows)
