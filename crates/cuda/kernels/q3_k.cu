// GGML_TYPE_Q3_K (id 11), 110 bytes per 256: hmask[32], qs[64] (2 low bits), scales[12]
// (sixteen 6-bit scales, biased by 32), fp16 d. Element e: half h = e / 128, shift index
// s = (e % 128) / 32, r = e % 32; code ((qs[32 h + r] >> 2 s) & 3) - (hmask[r] bit
// (4 h + s) ? 0 : 4) under scale 8 h + 2 s + r / 16; value d * scale * code.
GGUF_FN int scale_q3_K(const uint8_t *sc, int is) {
    const int lo = is < 8 ? (sc[is] & 15) : (sc[is - 8] >> 4);
    const int hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}
GGUF_FN float deq_q3_K(const uint8_t *b, int e) {
    const int h = e / 128, s = (e % 128) / 32, r = e % 32;
    const int q = (b[32 + 32 * h + r] >> (2 * s)) & 3;
    const int hbit = (b[r] >> (4 * h + s)) & 1;
    return h2f(ld_u16(b + 108)) * (float)scale_q3_K(b + 96, 8 * h + 2 * s + r / 16) * (float)(q - (hbit ? 0 : 4));
}
// (q + 4 hbit) - 4 per element: the non-negative part through dp4a, the -4 through the
// exact code sums.
GGUF_FN float vdot_q3_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 110;
    const int sub = kb % 8, h = sub / 4, s = sub % 4;
    int sumi[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        const uint32_t q = (ld_u32(b + 32 + 32 * h + 4 * i) >> (2 * s)) & 0x03030303u;
        const uint32_t hb = (ld_u32(b + 4 * i) >> (4 * h + s)) & 0x01010101u;
        sumi[i / 4] = dp4a((int)(q | (hb << 2)), q8_1_int(x, i), sumi[i / 4]);
    }
    const int sc0 = scale_q3_K(b + 96, 8 * h + 2 * s), sc1 = scale_q3_K(b + 96, 8 * h + 2 * s + 1);
    const int t0 = sumi[0] - 4 * q8_1_sum(x, 0, 4), t1 = sumi[1] - 4 * q8_1_sum(x, 4, 8);
    return h2f(ld_u16(b + 108)) * q8_1_d(x) * (float)(sc0 * t0 + sc1 * t1);
}
GGUF_DEQUANTIZE_KERNEL(q3_K, 256, 110, deq_q3_K)
GGUF_MMVQ_KERNEL(q3_K, vdot_q3_K)
