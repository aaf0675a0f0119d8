// GGML_TYPE_Q8_0 (id 8), 34 bytes: fp16 d, int8 qs[32]; value d * q.
GGUF_FN float deq_q8_0(const uint8_t *b, int j) { return h2f(ld_u16(b)) * (float)(int8_t)b[2 + j]; }
GGUF_FN float vdot_q8_0(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 34;
    int sumi = 0;
    for (int i = 0; i < 8; i++) sumi = dp4a((int)ld_u32(b + 2 + 4 * i), q8_1_int(x, i), sumi);
    return h2f(ld_u16(b)) * q8_1_d(x) * (float)sumi;
}
GGUF_DEQUANTIZE_KERNEL(q8_0, 32, 34, deq_q8_0)
GGUF_MMVQ_KERNEL(q8_0, vdot_q8_0)
