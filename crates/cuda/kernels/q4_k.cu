// GGML_TYPE_Q4_K (id 12), 144 bytes per 256: fp16 d, fp16 dmin, scales[12] (eight 6-bit
// scale / min pairs, get_scale_min_k4), qs[128]. Sub-block j (32 elements): nibble j % 2
// of qs[32 (j / 2) + r]; value d * sc_j * q - dmin * m_j.
GGUF_FN void scale_min_k4(const uint8_t *q, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}
GGUF_FN float deq_q4_K(const uint8_t *b, int e) {
    const int j = e / 32, r = e % 32;
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    const int q = (b[16 + 32 * (j / 2) + r] >> (4 * (j % 2))) & 15;
    return h2f(ld_u16(b)) * (float)sc * (float)q - h2f(ld_u16(b + 2)) * (float)m;
}
GGUF_FN float vdot_q4_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 144;
    const int j = kb % 8;
    int sc, m;
    scale_min_k4(b + 4, j, &sc, &m);
    int sumi = 0;
    for (int i = 0; i < 8; i++)
        sumi = dp4a((int)((ld_u32(b + 16 + 32 * (j / 2) + 4 * i) >> (4 * (j % 2))) & 0x0F0F0F0Fu), q8_1_int(x, i), sumi);
    return q8_1_d(x) * (h2f(ld_u16(b)) * (float)(sc * sumi) - h2f(ld_u16(b + 2)) * (float)(m * q8_1_sum(x, 0, 8)));
}
GGUF_DEQUANTIZE_KERNEL(q4_K, 256, 144, deq_q4_K)
GGUF_MMVQ_KERNEL(q4_K, vdot_q4_K)
