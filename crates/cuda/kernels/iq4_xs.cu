// GGML_TYPE_IQ4_XS (id 23), 136 bytes per 256: fp16 d, uint16 scales_h, scales_l[4],
// qs[128]. Sub-block ib (32 elements): 6-bit scale ls = nibble ib % 2 of scales_l[ib / 2]
// | ((scales_h >> 2 ib) & 3) << 4; element r < 16 is the low nibble of qs[16 ib + r],
// r >= 16 the high nibble of qs[16 ib + r - 16]; value d * (ls - 32) * kvalues_iq4nl[q].
GGUF_TABLE int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
GGUF_FN int scale_iq4_xs(const uint8_t *b, int ib) {
    return (int)(((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((ld_u16(b + 2) >> (2 * ib)) & 3) << 4)) - 32;
}
GGUF_FN float deq_iq4_xs(const uint8_t *b, int e) {
    const int ib = e / 32, r = e % 32;
    const int q = r < 16 ? (b[8 + 16 * ib + r] & 15) : (b[8 + 16 * ib + r - 16] >> 4);
    return h2f(ld_u16(b)) * (float)scale_iq4_xs(b, ib) * (float)kvalues_iq4nl[q];
}
GGUF_FN int iq4nl_lut4(uint32_t v, int shift) {
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(uint8_t)kvalues_iq4nl[(v >> (8 * k + shift)) & 15] << (8 * k);
    return (int)r;
}
GGUF_FN float vdot_iq4_xs(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 136;
    const int ib = kb % 8;
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t v = ld_u32(b + 8 + 16 * ib + 4 * i);
        sumi = dp4a(iq4nl_lut4(v, 0), q8_1_int(x, i), sumi);
        sumi = dp4a(iq4nl_lut4(v, 4), q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * q8_1_d(x) * (float)(scale_iq4_xs(b, ib) * sumi);
}
GGUF_DEQUANTIZE_KERNEL(iq4_xs, 256, 136, deq_iq4_xs)
GGUF_MMVQ_KERNEL(iq4_xs, vdot_iq4_xs)
