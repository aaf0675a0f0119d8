// GGML_TYPE_Q5_1 (id 7), 24 bytes: fp16 d, fp16 m, qh[4], qs[16]; value d * q + m.
GGUF_FN float deq_q5_1(const uint8_t *b, int j) {
    const uint32_t qh = ld_u32(b + 4);
    const int lo = j < 16 ? (b[8 + j] & 0xF) : (b[8 + j - 16] >> 4);
    const int q = lo | (int)(((qh >> j) & 1) << 4);
    return h2f(ld_u16(b)) * (float)q + h2f(ld_u16(b + 2));
}
GGUF_FN int qh_to_bit4(uint32_t h) {
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) | ((h << 25) & 0x10000000u));
}
// ggml's vec_dot_q5_1_q8_1: d * dx * sumi + m * s.
GGUF_FN float vdot_q5_1(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 24;
    const uint32_t qh = ld_u32(b + 4);
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const int v = (int)ld_u32(b + 8 + 4 * i);
        sumi = dp4a((v & 0x0F0F0F0F) | qh_to_bit4(qh >> (4 * i)), q8_1_int(x, i), sumi);
        sumi = dp4a(((v >> 4) & 0x0F0F0F0F) | qh_to_bit4(qh >> (16 + 4 * i)), q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * q8_1_d(x) * (float)sumi + h2f(ld_u16(b + 2)) * q8_1_s(x);
}
GGUF_DEQUANTIZE_KERNEL(q5_1, 32, 24, deq_q5_1)
GGUF_MMVQ_KERNEL(q5_1, vdot_q5_1)
