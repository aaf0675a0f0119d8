// GGML_TYPE_Q5_0 (id 6), 22 bytes: fp16 d, qh[4] (bit j = fifth bit of element j), qs[16]
// as q4_0's; value d * (q - 16).
GGUF_FN float deq_q5_0(const uint8_t *b, int j) {
    const uint32_t qh = ld_u32(b + 2);
    const int lo = j < 16 ? (b[6 + j] & 0xF) : (b[6 + j - 16] >> 4);
    const int q = lo | (int)(((qh >> j) & 1) << 4);
    return h2f(ld_u16(b)) * (float)(q - 16);
}
// Bits 0..3 of h to bit 4 of bytes 0..3.
GGUF_FN int qh_to_bit4(uint32_t h) {
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) | ((h << 25) & 0x10000000u));
}
// ggml's vec_dot_q5_0_q8_1: d * (dx * sumi - 16 * s).
GGUF_FN float vdot_q5_0(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 22;
    const uint32_t qh = ld_u32(b + 2);
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const int v = (int)ld_u32(b + 6 + 4 * i);
        sumi = dp4a((v & 0x0F0F0F0F) | qh_to_bit4(qh >> (4 * i)), q8_1_int(x, i), sumi);
        sumi = dp4a(((v >> 4) & 0x0F0F0F0F) | qh_to_bit4(qh >> (16 + 4 * i)), q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * (q8_1_d(x) * (float)sumi - 16.0f * q8_1_s(x));
}
GGUF_DEQUANTIZE_KERNEL(q5_0, 32, 22, deq_q5_0)
GGUF_MMVQ_KERNEL(q5_0, vdot_q5_0)
