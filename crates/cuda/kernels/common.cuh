// The prelude every kernel source is compiled with (prepended by gguf-cuda): integer
// types, half / bfloat16 conversions, byte loads, dp4a, a warp sum, the q8_1 block and the
// kernel macros. No system header is included, so NVRTC needs no include path.
//
// Built twice: by NVRTC for the device, and (with GGUF_HOST defined) by the host C++
// compiler in gguf-cuda's tests, which run the per-type functions on the CPU against
// ggml-quants. Everything a type defines is a GGUF_FN function of one block; the
// GGUF_*_KERNEL macros turn those into `extern "C" __global__` entry points (device) or
// plain loops (host).

typedef unsigned char uint8_t;
typedef signed char int8_t;
typedef unsigned short uint16_t;
typedef short int16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;

#ifdef GGUF_HOST
#define GGUF_FN static inline
#define GGUF_TABLE static const
#else
#define GGUF_FN static __device__ __forceinline__
#define GGUF_TABLE static __constant__ const
#endif

// Little-endian loads from any byte address (blocks such as mxfp4's 17 bytes leave no
// alignment to rely on).
GGUF_FN uint32_t ld_u16(const uint8_t *p) { return (uint32_t)p[0] | ((uint32_t)p[1] << 8); }
GGUF_FN uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#ifdef GGUF_HOST
GGUF_FN float bits_f32(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
GGUF_FN float h2f(uint32_t h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v;
    if (e == 0) v = (float)m * (1.0f / 16777216.0f);
    else if (e == 31) v = m ? bits_f32(0x7fc00000u) : bits_f32(0x7f800000u);
    else v = bits_f32(((e + 112) << 23) | (m << 13));
    return s ? -v : v;
}
GGUF_FN int dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int)(int8_t)(a >> (8 * k)) * (int)(int8_t)(b >> (8 * k));
    return c;
}
#else
GGUF_FN float bits_f32(uint32_t u) { return __uint_as_float(u); }
GGUF_FN float h2f(uint32_t h) {
    float f;
    unsigned short hs = (unsigned short)h;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(hs));
    return f;
}
// f32 -> f16 bits, round to nearest even (as ggml's GGML_FP32_TO_FP16).
GGUF_FN uint16_t f2h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
GGUF_FN int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
GGUF_FN float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
GGUF_FN float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
#endif

GGUF_FN float bf2f(uint32_t h) { return bits_f32(h << 16); }

// ggml's block_q8_1 (36 bytes): fp16 d, fp16 s = d * sum(qs), 32 int8 codes. The
// activation format of every mat-vec here.
#define QK8_1 32
#define Q8_1_BYTES 36
GGUF_FN float q8_1_d(const uint8_t *b) { return h2f(ld_u16(b)); }
GGUF_FN float q8_1_s(const uint8_t *b) { return h2f(ld_u16(b + 2)); }
// Codes 4i..4i+3 as one int (i < 8).
GGUF_FN int q8_1_int(const uint8_t *b, int i) { return (int)ld_u32(b + 4 + 4 * i); }
// Sum of codes 4i..4i+3 over i in [i0, i1).
GGUF_FN int q8_1_sum(const uint8_t *b, int i0, int i1) {
    int s = 0;
    for (int i = i0; i < i1; i++) s = dp4a(0x01010101, q8_1_int(b, i), s);
    return s;
}

// Entry points of a weight type NAME with blocks of QK elements in TS bytes:
//   DEQ(block, j)      -> float: element j of one block
//   VDOT(row, kb, x)   -> float: elements [32 kb, 32 kb + 32) of a row dotted with the
//                         q8_1 block x (the k-th of the activation row)
//
// dequantize_NAME(src, dst, n): dst[i] = element i of src (n elements, whole blocks).
// dequantize_NAME_f16(src, dst, n): the same as fp16 bits.
// mmvq_NAME(w, x, y, ncols, nrows, row_bytes): y[c * nrows + r] = row r of w dotted with
//   activation row c of x (q8_1, ncols / 32 blocks each) for c < gridDim.y; one warp per
//   row, 4 rows per 128-thread block.
#ifdef GGUF_HOST
#define GGUF_DEQUANTIZE_KERNEL(NAME, QK, TS, DEQ)                                               \
    extern "C" void host_dequantize_##NAME(const uint8_t *src, float *dst, int64_t n) {        \
        for (int64_t i = 0; i < n; i++) dst[i] = DEQ(src + (i / (QK)) * (TS), (int)(i % (QK))); \
    }
#define GGUF_MMVQ_KERNEL(NAME, VDOT)                                                             \
    extern "C" void host_mmvq_##NAME(const uint8_t *w, const uint8_t *x, float *y, int ncols,   \
                                     int nrows, int64_t row_bytes) {                             \
        for (int r = 0; r < nrows; r++) {                                                        \
            float acc = 0.0f;                                                                    \
            for (int kb = 0; kb < ncols / QK8_1; kb++)                                           \
                acc += VDOT(w + r * row_bytes, kb, x + (int64_t)kb * Q8_1_BYTES);                 \
            y[r] = acc;                                                                          \
        }                                                                                        \
    }
#else
#define GGUF_DEQUANTIZE_KERNEL(NAME, QK, TS, DEQ)                                                \
    extern "C" __global__ void dequantize_##NAME(const uint8_t *__restrict__ src,              \
                                                 float *__restrict__ dst, int64_t n) {          \
        int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
        if (i < n) dst[i] = DEQ(src + (i / (QK)) * (TS), (int)(i % (QK)));                     \
    }                                                                                            \
    extern "C" __global__ void dequantize_##NAME##_f16(const uint8_t *__restrict__ src,        \
                                                       uint16_t *__restrict__ dst, int64_t n) { \
        int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                             \
        if (i < n) dst[i] = f2h(DEQ(src + (i / (QK)) * (TS), (int)(i % (QK))));                \
    }
#define GGUF_MMVQ_KERNEL(NAME, VDOT)                                                              \
    extern "C" __global__ void mmvq_##NAME(const uint8_t *__restrict__ w,                       \
                                           const uint8_t *__restrict__ x, float *__restrict__ y, \
                                           int ncols, int nrows, int64_t row_bytes) {           \
        const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;                       \
        const int lane = threadIdx.x % 32;                                                       \
        if (row >= nrows) return; /* the whole warp: row is uniform in a warp */                 \
        const int nkb = ncols / QK8_1;                                                           \
        const uint8_t *wr = w + (int64_t)row * row_bytes;                                        \
        const uint8_t *xr = x + (int64_t)blockIdx.y * nkb * Q8_1_BYTES;                          \
        float acc = 0.0f;                                                                        \
        for (int kb = lane; kb < nkb; kb += 32) acc += VDOT(wr, kb, xr + (int64_t)kb * Q8_1_BYTES); \
        acc = warp_sum(acc);                                                                     \
        if (lane == 0) y[(int64_t)blockIdx.y * nrows + row] = acc;                               \
    }
#endif

// mmv_NAME(w, x, y, ncols, nrows, row_bytes): as mmvq_NAME but with f32 activations (the
// float weight types, where ggml's CUDA backend does not quantize the activations).
#ifdef GGUF_HOST
#define GGUF_MMV_KERNEL(NAME, QK, TS, DEQ)                                                       \
    extern "C" void host_mmv_##NAME(const uint8_t *w, const float *x, float *y, int ncols,      \
                                    int nrows, int64_t row_bytes) {                              \
        for (int r = 0; r < nrows; r++) {                                                        \
            float acc = 0.0f;                                                                    \
            for (int j = 0; j < ncols; j++)                                                      \
                acc += DEQ(w + r * row_bytes + (j / (QK)) * (TS), j % (QK)) * x[j];              \
            y[r] = acc;                                                                          \
        }                                                                                        \
    }
#else
#define GGUF_MMV_KERNEL(NAME, QK, TS, DEQ)                                                       \
    extern "C" __global__ void mmv_##NAME(const uint8_t *__restrict__ w,                        \
                                          const float *__restrict__ x, float *__restrict__ y,   \
                                          int ncols, int nrows, int64_t row_bytes) {            \
        const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;                       \
        const int lane = threadIdx.x % 32;                                                       \
        if (row >= nrows) return;                                                                \
        const uint8_t *wr = w + (int64_t)row * row_bytes;                                        \
        const float *xr = x + (int64_t)blockIdx.y * ncols;                                       \
        float acc = 0.0f;                                                                        \
        for (int j = lane; j < ncols; j += 32) acc += DEQ(wr + (j / (QK)) * (TS), j % (QK)) * xr[j]; \
        acc = warp_sum(acc);                                                                     \
        if (lane == 0) y[(int64_t)blockIdx.y * nrows + row] = acc;                               \
    }
#endif
