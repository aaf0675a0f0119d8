// A third-party type's kernels (tests/it/plugin.rs): `q8_test`, 36 bytes per 32
// elements, f32 d then 32 int8 codes; value d * q. Compiled after gguf-cuda's prelude like
// every built-in source.
GGUF_FN float deq_q8_test(const uint8_t *b, int j) { return bits_f32(ld_u32(b)) * (float)(int8_t)b[4 + j]; }
GGUF_FN float vdot_q8_test(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 36;
    int sumi = 0;
    for (int i = 0; i < 8; i++) sumi = dp4a((int)ld_u32(b + 4 + 4 * i), q8_1_int(x, i), sumi);
    return bits_f32(ld_u32(b)) * q8_1_d(x) * (float)sumi;
}
GGUF_DEQUANTIZE_KERNEL(q8_test, 32, 36, deq_q8_test)
GGUF_MMVQ_KERNEL(q8_test, vdot_q8_test)
