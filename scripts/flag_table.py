#!/usr/bin/env python3
"""The README's llama.cpp flag table, generated from llama.cpp's own argument parser and
this project's `gguf` binary, so it stays true when either changes.

    python3 scripts/flag_table.py LLAMA_CPP_SRC GGUF_BIN > /tmp/flags.md
    python3 scripts/flag_table.py LLAMA_CPP_SRC GGUF_BIN --readme README.md   # rewrite in place
    python3 scripts/flag_table.py LLAMA_CPP_SRC GGUF_BIN --flags-out crates/cli/src/llama_flags.txt

`--flags-out` writes every spelling of every llama.cpp flag (all of arg.cpp's examples and
llama-bench), one per line: `gguf` uses it to say "a llama.cpp flag not supported here"
instead of clap's "unexpected argument", and to keep `-nkvo` from being read as `-n kvo`.

Rows: every option `common/arg.cpp` gives llama-cli / llama-completion (examples CLI or
COMPLETION, or common to all), and every option llama-bench's usage prints. Status:
"same" when `gguf run`/`gguf chat` (or `gguf bench`) take the flag by that name, "ignored"
when it is accepted and dropped with a note (`IGNORED_FLAGS` in crates/cli/src/app.rs),
"not supported" (an error naming it, or unknown to clap), with `NOTES` for what differs.
"""
import re
import subprocess
import sys
from pathlib import Path

# What differs from llama.cpp, by llama.cpp's first spelling of the flag.
NOTES = {
    "-c": "same; 0 = the training context; the KV cache is reserved lazily and a -c that cannot fit is refused",
    "-n": "same (-1 = until end of generation or a full context)",
    "-t": "same; above 512 cut with a warning",
    "-cnv": "not supported: conversation mode is `gguf chat`",
    "-no-cnv": "ignored: `gguf run` never enters conversation mode",
    "-sys": "same (through the chat template; ChatML if the model has none)",
    "-e": "same (default on; `--no-escape` off)",
    "-f": "same (`-` = stdin; one trailing newline dropped)",
    "-m": "same, and a `gguf fetch --list` name resolves (fetched on first use)",
    "-r": "same",
    "-s": "same; -1 = random",
    "--temp": "same; must be finite",
    "--top-k": "same; ≤ 0 = off",
    "--repeat-last-n": "same; -1 = the whole context",
    "-ctk": "same; f16, f32, q8_0",
    "-ctv": "same; f16, f32, q8_0",
    "-ub": "same",
    "--chat-template": "same (`gguf chat`); a built-in name or Jinja",
    "--chat-template-file": "same (`gguf chat`)",
    "-j": "same (llguidance)",
    "--grammar": "same (GBNF via llguidance; `%llguidance` for Lark)",
    "--grammar-file": "same",
    "--ignore-eos": "same",
    "-p": "same",
    "-hf": "not supported: use -m FILE or `gguf fetch`",
    "-mu": "not supported: use -m FILE or `gguf fetch NAME`",
    "-dev": "not supported: only the CPU for now",
    "-ngl": "ignored: every layer runs on the CPU",
    "-fa": "ignored: attention always follows llama.cpp's CPU flash attention",
    "--jinja": "ignored: templates are always rendered with Jinja",
    "-tb": "ignored: one thread count for prompt and generation",
}


# llama-bench's flags, where they differ from the CLI's.
BENCH_NOTES = {
    "-ngl": "accepted as a list (rows report it as asked, with a note): every layer runs on the CPU",
    "-fa": "same: lists of 0/1/on/off/auto, reported as asked; attention always follows llama.cpp's CPU flash attention",
    "-dev": "accepted: `auto` or `none` only (the CPU)",
    "-p": "same: lists and ranges (0 = skip)",
    "-n": "same: lists and ranges (0 = skip)",
    "-pg": "same",
    "-d": "same: lists and ranges; the depth is evaluated once per test and kept across its repetitions",
    "-b": "same: lists; the prompt goes to the engine in calls of -b tokens, each evaluated in passes of min(-b, -ub) tokens",
    "-ub": "same: lists and ranges",
    "-ctk": "same: lists of f16, f32, q8_0 (not bf16, q4_0, q4_1, q5_0, q5_1, iq4_nl)",
    "-ctv": "same: lists of f16, f32, q8_0 (not bf16, q4_0, q4_1, q5_0, q5_1, iq4_nl)",
    "-t": "same: lists and ranges; a worker pool per count; above 512 cut with a warning",
    "-r": "same",
    "-o": "same: csv, json, jsonl, md, sql, none (build_commit is this build's version)",
    "-oe": "same",
    "-m": "same: a comma list, and a `gguf fetch --list` name resolves",
    "-v": "same (this engine's own log lines)",
    "--progress": "same (the lines start with `gguf bench:`)",
    "--list-devices": "same (no devices besides the CPU)",
    "-hf": "not supported: use -m FILE or `gguf fetch`",
    "--numa": "accepted with a note: no effect here",
    "--prio": "accepted with a note: no effect here",
    "-C": "accepted as `--cpu-mask` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "--cpu-strict": "accepted as `--cpu-strict` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "--poll": "accepted as `--poll` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-ncmoe": "accepted as `--n-cpu-moe` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-sm": "accepted as `--split-mode` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-mg": "accepted as `--main-gpu` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-nkvo": "accepted as `--no-kv-offload` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-lm": "accepted as `--load-mode` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-lzm": "accepted as `--lazy-mode` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-embd": "accepted as `--embeddings` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-ts": "accepted as `--tensor-split` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-ot": "accepted as `--override-tensor` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-nopo": "accepted as `--no-op-offload` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "--no-host": "accepted as `--no-host` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "--repack": "accepted as `--repack` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-fitt": "accepted as `--fit-target` (a list; rows report it as asked, with a note): no effect on this CPU engine",
    "-fitc": "accepted as `--fit-ctx` (a list; rows report it as asked, with a note): no effect on this CPU engine",
}


def arg_cpp_options(src: Path):
    """(flags, examples or None, excludes) for every add_opt(common_arg(...)) in arg.cpp."""
    text = (src / "common/arg.cpp").read_text()
    out = []
    for m in re.finditer(r"add_opt\(common_arg\(", text):
        i = m.end()
        depth = 2
        j = i
        while depth and j < len(text):
            c = text[j]
            if c == '"':  # skip string literals (they hold parentheses)
                j += 1
                while text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            j += 1
        stmt = text[m.start():j + 200]
        stmt = stmt[:stmt.find(";") if ";" in stmt else len(stmt)]
        lists = re.findall(r"\{((?:\s*\"[^\"]+\"\s*,?)+)\}", text[i:j])
        flags = []
        for lst in lists[:2]:
            names = re.findall(r"\"([^\"]+)\"", lst)
            if all(n.startswith("-") for n in names):
                flags += names
            else:
                break
        ex = re.search(r"set_examples\(\{([^}]*)\}", stmt)
        exc = re.search(r"set_excludes\(\{([^}]*)\}", stmt)
        examples = set(re.findall(r"LLAMA_EXAMPLE_(\w+)", ex.group(1))) if ex else None
        excludes = set(re.findall(r"LLAMA_EXAMPLE_(\w+)", exc.group(1))) if exc else set()
        if flags:
            out.append((flags, examples, excludes))
    return out


def bench_options(src: Path):
    text = (src / "tools/llama-bench/llama-bench.cpp").read_text()
    usage = text[text.find("static void print_usage"):]
    usage = usage[:usage.find("\n}\n")]
    out = []
    for line in re.findall(r'printf\("  (-[^"<]*)', usage):
        line = line.split("\\n")[0].split("  ")[0]
        flags = [f.strip() for f in re.split(r"[ ,]+", line) if f.startswith("-")]
        if flags:
            out.append(flags)
    return out


def our_flags(binary: str, *commands: str):
    flags = set()
    for c in commands:
        h = subprocess.run([binary, c, "--help"], capture_output=True, text=True).stdout
        flags |= set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", h))
    return flags


def cli_tables(repo: Path):
    main = (repo / "crates/cli/src/app.rs").read_text()

    def table(name):
        body = main[main.find(f"const {name}"):]
        body = body[:body.find("];")]
        return set(re.findall(r'\(\s*"(-[^"]+)"', body))

    # BENCH_FLAGS: the ones `gguf bench` maps to its own long flags
    return table("LLAMA_SHORT_FLAGS") | table("BENCH_FLAGS"), table("IGNORED_FLAGS"), table("UNSUPPORTED_FLAGS")


def status(flags, ours, short, ignored, unsupported, notes=NOTES):
    key = next((f for f in flags if f in notes), None)
    taken = [f for f in flags if f in ours or f in short]
    if key:
        s = notes[key]
    elif any(f in unsupported for f in flags):
        return "not supported (the error names it)"
    elif any(f in ignored for f in flags):
        return "ignored (with a note)"
    elif taken:
        s = "same"
    else:
        return "not supported"
    if s.startswith("same") and taken and len(taken) < len(flags):
        s += " — spelled " + ", ".join(f"`{f}`" for f in taken)
    return s


def main():
    src, binary = Path(sys.argv[1]), sys.argv[2]
    repo = Path(__file__).resolve().parent.parent
    short, ignored, unsupported = cli_tables(repo)
    run_flags = our_flags(binary, "run", "chat")
    bench_flags = our_flags(binary, "bench")
    lines = ["| llama-cli / llama-completion | gguf run / chat |", "|---|---|"]
    seen = set()
    for flags, examples, excludes in arg_cpp_options(src):
        applies = examples is None or examples & {"CLI", "COMPLETION"}
        if not applies or excludes & {"CLI", "COMPLETION"} == {"CLI", "COMPLETION"}:
            continue
        k = tuple(flags)
        if k in seen:
            continue
        seen.add(k)
        lines.append(f"| `{', '.join(flags)}` | {status(flags, run_flags, short, ignored, unsupported)} |")
    lines += ["", "| llama-bench | gguf bench |", "|---|---|"]
    for flags in bench_options(src):
        lines.append(f"| `{', '.join(flags)}` | {status(flags, bench_flags, short, ignored, unsupported, BENCH_NOTES)} |")
    table = "\n".join(lines) + "\n"
    if "--flags-out" in sys.argv:
        every = {f for flags, _, _ in arg_cpp_options(src) for f in flags}
        every |= {f for flags in bench_options(src) for f in flags}
        out = Path(sys.argv[sys.argv.index("--flags-out") + 1])
        out.write_text("".join(f + "\n" for f in sorted(every)))
    if "--readme" in sys.argv:
        readme = Path(sys.argv[sys.argv.index("--readme") + 1])
        text = readme.read_text()
        a, b = "<!-- flags:begin -->\n", "<!-- flags:end -->"
        if a not in text:
            sys.exit(f"{readme}: no {a.strip()} marker")
        head, rest = text.split(a, 1)
        readme.write_text(head + a + table + rest[rest.index(b):])
    else:
        sys.stdout.write(table)


if __name__ == "__main__":
    main()
