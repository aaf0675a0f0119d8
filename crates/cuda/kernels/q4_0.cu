// GGML_TYPE_Q4_0 (id 2), 18 bytes: fp16 d, qs[16]; element j < 16 is the low nibble of
// qs[j], element j + 16 its high nibble; value d * (q - 8).
GGUF_FN float deq_q4_0(const uint8_t *b, int j) {
    const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
    return h2f(ld_u16(b)) * (float)(q - 8);
}
// ggml's vec_dot_q4_0_q8_1: d * (dx * sumi - 8 * s).
GGUF_FN float vdot_q4_0(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 18;
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const int v = (int)ld_u32(b + 2 + 4 * i);
        sumi = dp4a(v & 0x0F0F0F0F, q8_1_int(x, i), sumi);
        sumi = dp4a((v >> 4) & 0x0F0F0F0F, q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * (q8_1_d(x) * (float)sumi - 8.0f * q8_1_s(x));
}
GGUF_DEQUANTIZE_KERNEL(q4_0, 32, 18, deq_q4_0)
GGUF_MMVQ_KERNEL(q4_0, vdot_q4_0)
