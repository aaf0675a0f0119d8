// The libggml-cpu side of `crates/quant-kernels/examples/ggml_compare.rs`: for one type,
// random weights quantized by ggml (with a random importance matrix), random activations,
// and what ggml-cpu computes from them — `from_float` of token 0, `vec_dot` of every row
// with it, and `ggml_mul_mat` over all tokens (which takes the tiled / llamafile paths a
// prompt batch takes). Build against the cached llama.cpp (the AVX2-only build for the
// AVX2 paths):
//
//   B=~/.cache/gguf-engine/llama.cpp-build S=~/.cache/gguf-engine/llama.cpp-src
//   cc -O2 scripts/ggml_dots.c -I$S/ggml/include -L$B/bin -lggml-base -lggml-cpu -lm -o /tmp/ggml_dots
//   LD_LIBRARY_PATH=$B/bin /tmp/ggml_dots iq1_s 64 1024 16 /tmp/dots/iq1_s 7
//
// Writes DIR/meta ("type rows cols vec_dot_type tokens"), w.bin, x.bin (token 0), xq.bin,
// dots.bin, xt.bin (all tokens, f32) and mm.bin (tokens × rows, f32). With REPS and THREADS it
// also prints the fastest of REPS `mul_mat`s (compare: tests/lattice_bench.rs, QK_SHAPE).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

static uint64_t rng_state;
static double uniform(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double) (rng_state >> 11) / 9007199254740992.0;
}
static float gauss(void) {
    double u = uniform() + 1e-12, v = uniform();
    return (float) (sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void write_file(const char * dir, const char * name, const void * data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE * f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

int main(int argc, char ** argv) {
    if (argc != 7 && argc != 9) {
        fprintf(stderr, "usage: %s TYPE ROWS COLS TOKENS DIR SEED [REPS THREADS]\n", argv[0]);
        return 2;
    }
    enum ggml_type type = GGML_TYPE_COUNT;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char * name = ggml_type_name((enum ggml_type) t);
        if (name && strcmp(name, argv[1]) == 0) {
            type = (enum ggml_type) t;
        }
    }
    if (type == GGML_TYPE_COUNT) {
        fprintf(stderr, "unknown type %s\n", argv[1]);
        return 2;
    }
    const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]), tokens = atoll(argv[4]);
    const char * dir = argv[5];
    rng_state = strtoull(argv[6], NULL, 10) * 2654435761ULL + 1;
    mkdir(dir, 0755);
    ggml_cpu_init();

    float * wf = malloc(sizeof(float) * rows * cols);
    float * imat = malloc(sizeof(float) * cols);
    float * xf = malloc(sizeof(float) * tokens * cols);
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = gauss();
    for (int64_t i = 0; i < cols; i++) imat[i] = (float) (0.1 + uniform());
    for (int64_t i = 0; i < tokens * cols; i++) xf[i] = gauss();

    const size_t row_bytes = ggml_row_size(type, cols);
    uint8_t * w = malloc(row_bytes * rows);
    ggml_quantize_chunk(type, wf, w, 0, rows, cols, imat);

    const struct ggml_type_traits_cpu * tr = ggml_get_type_traits_cpu(type);
    const enum ggml_type vdt = tr->vec_dot_type;
    const size_t xq_bytes = ggml_row_size(vdt, cols);
    uint8_t * xq = malloc(xq_bytes);
    ggml_get_type_traits_cpu(vdt)->from_float(xf, xq, cols);
    float * dots = malloc(sizeof(float) * rows);
    for (int64_t r = 0; r < rows; r++) {
        tr->vec_dot(cols, &dots[r], 0, w + r * row_bytes, 0, xq, 0, 1);
    }

    struct ggml_init_params ip = { .mem_size = row_bytes * rows + sizeof(float) * (tokens * cols + tokens * rows) + (64 << 20),
                                   .mem_buffer = NULL, .no_alloc = false };
    struct ggml_context * ctx = ggml_init(ip);
    struct ggml_tensor * a = ggml_new_tensor_2d(ctx, type, cols, rows);
    struct ggml_tensor * b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, tokens);
    memcpy(a->data, w, row_bytes * rows);
    memcpy(b->data, xf, sizeof(float) * tokens * cols);
    struct ggml_tensor * c = ggml_mul_mat(ctx, a, b);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, c);
    if (ggml_graph_compute_with_ctx(ctx, gf, 1) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        return 1;
    }

    // With REPS: the fastest of REPS more `mul_mat`s on THREADS threads, in ms.
    if (argc == 9) {
        const int reps = atoi(argv[7]), threads = atoi(argv[8]);
        double best = 1e30;
        for (int i = 0; i < reps; i++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            ggml_graph_compute_with_ctx(ctx, gf, threads);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
            best = ms < best ? ms : best;
        }
        printf("ggml %s %lldx%lld n=%lld t=%d: %.3f ms\n", argv[1], (long long) rows, (long long) cols, (long long) tokens,
               threads, best);
    }

    char meta[256];
    int n = snprintf(meta, sizeof meta, "%d %lld %lld %d %lld\n", (int) type, (long long) rows, (long long) cols, (int) vdt,
                     (long long) tokens);
    write_file(dir, "meta", meta, (size_t) n);
    write_file(dir, "w.bin", w, row_bytes * rows);
    write_file(dir, "x.bin", xf, sizeof(float) * cols);
    write_file(dir, "xq.bin", xq, xq_bytes);
    write_file(dir, "dots.bin", dots, sizeof(float) * rows);
    write_file(dir, "xt.bin", xf, sizeof(float) * tokens * cols);
    write_file(dir, "mm.bin", c->data, sizeof(float) * tokens * rows);
    ggml_free(ctx);
    return 0;
}
