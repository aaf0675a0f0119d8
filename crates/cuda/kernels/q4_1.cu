// GGML_TYPE_Q4_1 (id 3), 20 bytes: fp16 d, fp16 m, qs[16]; value d * q + m.
GGUF_FN float deq_q4_1(const uint8_t *b, int j) {
    const int q = j < 16 ? (b[4 + j] & 0xF) : (b[4 + j - 16] >> 4);
    return h2f(ld_u16(b)) * (float)q + h2f(ld_u16(b + 2));
}
// ggml's vec_dot_q4_1_q8_1: d * dx * sumi + m * s.
GGUF_FN float vdot_q4_1(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 20;
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const int v = (int)ld_u32(b + 4 + 4 * i);
        sumi = dp4a(v & 0x0F0F0F0F, q8_1_int(x, i), sumi);
        sumi = dp4a((v >> 4) & 0x0F0F0F0F, q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * q8_1_d(x) * (float)sumi + h2f(ld_u16(b + 2)) * q8_1_s(x);
}
GGUF_DEQUANTIZE_KERNEL(q4_1, 32, 20, deq_q4_1)
GGUF_MMVQ_KERNEL(q4_1, vdot_q4_1)
