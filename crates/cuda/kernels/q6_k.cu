// GGML_TYPE_Q6_K (id 14), 210 bytes per 256: ql[128] (low 4 bits), qh[64] (high 2 bits),
// int8 scales[16], fp16 d. Element e: n = e / 128, g = (e % 128) / 32, r = e % 32; low
// bits nibble g / 2 of ql[64 n + 32 (g % 2) + r], high bits (qh[32 n + r] >> 2 g) & 3,
// scale scales[8 n + 2 g + r / 16]; value d * scale * (q - 32).
GGUF_FN float deq_q6_K(const uint8_t *b, int e) {
    const int n = e / 128, g = (e % 128) / 32, r = e % 32;
    const int lo = (b[64 * n + 32 * (g % 2) + r] >> (4 * (g / 2))) & 15;
    const int hi = (b[128 + 32 * n + r] >> (2 * g)) & 3;
    const int sc = (int8_t)b[192 + 8 * n + 2 * g + r / 16];
    return h2f(ld_u16(b + 208)) * (float)sc * (float)((lo | (hi << 4)) - 32);
}
GGUF_FN float vdot_q6_K(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)(kb / 8) * 210;
    const int sub = kb % 8, n = sub / 4, g = sub % 4;
    int sumi[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        const uint32_t lo = (ld_u32(b + 64 * n + 32 * (g % 2) + 4 * i) >> (4 * (g / 2))) & 0x0F0F0F0Fu;
        const uint32_t hi = ((ld_u32(b + 128 + 32 * n + 4 * i) >> (2 * g)) & 0x03030303u) << 4;
        sumi[i / 4] = dp4a((int)(lo | hi), q8_1_int(x, i), sumi[i / 4]);
    }
    const int sc0 = (int8_t)b[192 + 8 * n + 2 * g], sc1 = (int8_t)b[192 + 8 * n + 2 * g + 1];
    const int t0 = sumi[0] - 32 * q8_1_sum(x, 0, 4), t1 = sumi[1] - 32 * q8_1_sum(x, 4, 8);
    return h2f(ld_u16(b + 208)) * q8_1_d(x) * (float)(sc0 * t0 + sc1 * t1);
}
GGUF_DEQUANTIZE_KERNEL(q6_K, 256, 210, deq_q6_K)
GGUF_MMVQ_KERNEL(q6_K, vdot_q6_K)
