# After ggml_compare_gen.py OUTDIR: checks that llamafile_sgemm (tinyBLAS, what llama.cpp uses for
# q4_0/q5_0/q8_0 batches) gives the same floats as ggml vec_dot, so one arithmetic covers both.
import ctypes, numpy as np, os, sys
# Another build of the same source (an AVX2-only one, say): GGML_COMPARE_BUILD=DIR (its bin/).
B = os.path.join(os.path.expanduser(os.environ.get("GGML_COMPARE_BUILD", "~/.cache/gguf-engine/llama.cpp-build")), "bin/")
base = ctypes.CDLL(B + "libggml-base.so", mode=ctypes.RTLD_GLOBAL)
cpu = ctypes.CDLL(B + "libggml-cpu.so", mode=ctypes.RTLD_GLOBAL)
cpu.ggml_cpu_init()
class Params(ctypes.Structure):
    _fields_ = [("ith", ctypes.c_int), ("nth", ctypes.c_int), ("wsize", ctypes.c_size_t), ("wdata", ctypes.c_void_p), ("threadpool", ctypes.c_void_p), ("use_ref", ctypes.c_bool)]
f = cpu.llamafile_sgemm
f.restype = ctypes.c_bool
f.argtypes = [ctypes.POINTER(Params), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
out = sys.argv[1]
for name in ["q5_0", "q8_0", "q4_0"]:
    d = f"{out}/{name}"
    tid, rows, cols, vdt = map(int, open(d + "/meta").read().split())
    w = np.fromfile(d + "/w.bin", dtype=np.uint8)
    xq = np.fromfile(d + "/xq.bin", dtype=np.uint8)
    dots = np.fromfile(d + "/dots.bin", dtype=np.float32)
    n = 5
    xb = np.tile(xq, n)
    C = np.zeros(rows * n, dtype=np.float32)
    p = Params(0, 1, 0, None, None, False)
    k = cols // 32
    rs = len(w) // rows
    xrs = len(xq)
    # lda/ldb in blocks (elements of the block type), as ggml passes nb01/ggml_type_size
    ok = f(ctypes.byref(p), rows, n, k, w.ctypes.data, rs // (rs // k), xb.ctypes.data, xrs // (xrs // k), C.ctypes.data, rows, tid, vdt, 0)
    same = sum(int(np.array_equal(C[j*rows:(j+1)*rows], dots)) for j in range(n))
    diff = np.abs(C[:rows] - dots).max()
    print(name, "sgemm ok", ok, "columns identical to vec_dot:", same, "/", n, "max abs diff", diff)
