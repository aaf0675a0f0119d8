// GGML_TYPE_Q8_K (id 15), 292 bytes per 256: f32 d, int8 qs[256], int16 bsums[16]
// (unused here); value d * q.
GGUF_FN float deq_q8_K(const uint8_t *b, int e) { return bits_f32(ld_u32(b)) * (float)(int8_t)b[4 + e]; }
GGUF_FN float vdot_q8_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 292;
    const int sub = kb % 8;
    int sumi = 0;
    for (int i = 0; i < 8; i++) sumi = dp4a((int)ld_u32(b + 4 + 32 * sub + 4 * i), q8_1_int(x, i), sumi);
    return bits_f32(ld_u32(b)) * q8_1_d(x) * (float)sumi;
}
GGUF_DEQUANTIZE_KERNEL(q8_K, 256, 292, deq_q8_K)
GGUF_MMVQ_KERNEL(q8_K, vdot_q8_K)
