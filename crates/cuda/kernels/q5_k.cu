// GGML_TYPE_Q5_K (id 13), 176 bytes per 256: fp16 d, fp16 dmin, scales[12] (as q4_K),
// qh[32] (bit j of qh[r] is the fifth bit of sub-block j's element r), qs[128] (as q4_K).
GGUF_FN void scale_min_k4(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
GGUF_FN float deq_q5_K(const uint8_t *b, int e) {
    const int j = e / 32, r = e % 32;
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    const int q = ((b[48 + 32 * (j / 2) + r] >> (4 * (j % 2))) & 15) | (((b[16 + r] >> j) & 1) << 4);
    return h2f(ld_u16(b)) * (float)sc * (float)q - h2f(ld_u16(b + 2)) * (float)m;
}
GGUF_FN float vdot_q5_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 176;
    const int j = kb % 8;
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    int sumi = 0;
    for (int i = 0; i < 8; i++) {
        const uint32_t lo = (ld_u32(b + 48 + 32 * (j / 2) + 4 * i) >> (4 * (j % 2))) & 0x0F0F0F0Fu;
        const uint32_t hi = ((ld_u32(b + 16 + 4 * i) >> j) & 0x01010101u) << 4;
        sumi = dp4a((int)(lo | hi), q8_1_int(x, i), sumi);
    }
    return q8_1_d(x) * (h2f(ld_u16(b)) * (float)(sc * sumi) - h2f(ld_u16(b + 2)) * (float)(m * q8_1_sum(x, 0, 8)));
}
GGUF_DEQUANTIZE_KERNEL(q5_K, 256, 176, deq_q5_K)
GGUF_MMVQ_KERNEL(q5_K, vdot_q5_K)
