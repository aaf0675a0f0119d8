// GGML_TYPE_MXFP4 (id 39), 17 bytes: E8M0 exponent e, qs[16] (nibbles as q4_0) indexing
// ggml's doubled E2M1 codebook; value kv[q] * 2^(e - 128) (ggml_e8m0_to_fp32_half).
GGUF_TABLE int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
GGUF_FN float e8m0_half(uint32_t e) { return bits_f32(e < 2 ? (0x00200000u << e) : ((e - 1) << 23)); }
GGUF_FN float deq_mxfp4(const uint8_t *b, int j) {
    const int q = j < 16 ? (b[1 + j] & 0xF) : (b[1 + j - 16] >> 4);
    return (float)kvalues_mxfp4[q] * e8m0_half(b[0]);
}
GGUF_FN int mxfp4_lut4(uint32_t v, int shift) {
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(uint8_t)kvalues_mxfp4[(v >> (8 * k + shift)) & 15] << (8 * k);
    return (int)r;
}
GGUF_FN float vdot_mxfp4(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 17;
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t v = ld_u32(b + 1 + 4 * i);
        sumi = dp4a(mxfp4_lut4(v, 0), q8_1_int(x, i), sumi);
        sumi = dp4a(mxfp4_lut4(v, 4), q8_1_int(x, i + 4), sumi);
    }
    return e8m0_half(b[0]) * q8_1_d(x) * (float)sumi;
}
GGUF_DEQUANTIZE_KERNEL(mxfp4, 32, 17, deq_mxfp4)
GGUF_MMVQ_KERNEL(mxfp4, vdot_mxfp4)
