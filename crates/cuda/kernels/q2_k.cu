// GGML_TYPE_Q2_K (id 10), 84 bytes per 256: scales[16] (low nibble scale, high nibble
// min), qs[64] (2 bits each), fp16 d, fp16 dmin. Element e: half h = e / 128, shift
// index s = (e % 128) / 32, r = e % 32; code (qs[32 h + r] >> 2 s) & 3 under scale byte
// 8 h + 2 s + r / 16; value d * (sc & 15) * q - dmin * (sc >> 4).
GGUF_FN float deq_q2_K(const uint8_t *b, int e) {
    const int h = e / 128, s = (e % 128) / 32, r = e % 32;
    const int sc = b[8 * h + 2 * s + r / 16];
    const int q = (b[16 + 32 * h + r] >> (2 * s)) & 3;
    return h2f(ld_u16(b + 80)) * (float)(sc & 15) * (float)q - h2f(ld_u16(b + 82)) * (float)(sc >> 4);
}
// One 32-element sub-block (kb % 8) against one q8_1 block; the mins use exact code sums
// per 16 elements (as ggml's vec_dot_q2_K_q8_1).
GGUF_FN float vdot_q2_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 84;
    const int sub = kb % 8, h = sub / 4, s = sub % 4;
    const int sc0 = b[8 * h + 2 * s], sc1 = b[8 * h + 2 * s + 1];
    int sumi0 = 0, sumi1 = 0;
    for (int i = 0; i < 4; i++) {
        sumi0 = dp4a((int)((ld_u32(b + 16 + 32 * h + 4 * i) >> (2 * s)) & 0x03030303u), q8_1_int(x, i), sumi0);
        sumi1 = dp4a((int)((ld_u32(b + 16 + 32 * h + 16 + 4 * i) >> (2 * s)) & 0x03030303u), q8_1_int(x, i + 4), sumi1);
    }
    const int sumq0 = q8_1_sum(x, 0, 4), sumq1 = q8_1_sum(x, 4, 8);
    const float d = h2f(ld_u16(b + 80)), dmin = h2f(ld_u16(b + 82));
    return q8_1_d(x) * (d * (float)((sc0 & 15) * sumi0 + (sc1 & 15) * sumi1) -
                        dmin * (float)((sc0 >> 4) * sumq0 + (sc1 >> 4) * sumq1));
}
GGUF_DEQUANTIZE_KERNEL(q2_K, 256, 84, deq_q2_K)
GGUF_MMVQ_KERNEL(q2_K, vdot_q2_K)
