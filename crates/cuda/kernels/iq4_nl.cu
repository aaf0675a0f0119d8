// GGML_TYPE_IQ4_NL (id 20), 18 bytes: fp16 d, qs[16] (nibbles as q4_0) indexing the
// non-linear codebook kvalues_iq4nl; value d * kv[q].
GGUF_TABLE int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
GGUF_FN float deq_iq4_nl(const uint8_t *b, int j) {
    const int q = j < 16 ? (b[2 + j] & 0xF) : (b[2 + j - 16] >> 4);
    return h2f(ld_u16(b)) * (float)kvalues_iq4nl[q];
}
// Four nibbles of v (at bit offsets 0, 8, 16, 24 after `shift`) through the codebook.
GGUF_FN int iq4nl_lut4(uint32_t v, int shift) {
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(uint8_t)kvalues_iq4nl[(v >> (8 * k + shift)) & 15] << (8 * k);
    return (int)r;
}
GGUF_FN float vdot_iq4_nl(const uint8_t *row, int kb, const uint8_t *x) {
    const uint8_t *b = row + (int64_t)kb * 18;
    int sumi = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t v = ld_u32(b + 2 + 4 * i);
        sumi = dp4a(iq4nl_lut4(v, 0), q8_1_int(x, i), sumi);
        sumi = dp4a(iq4nl_lut4(v, 4), q8_1_int(x, i + 4), sumi);
    }
    return h2f(ld_u16(b)) * q8_1_d(x) * (float)sumi;
}
GGUF_DEQUANTIZE_KERNEL(iq4_nl, 32, 18, deq_iq4_nl)
GGUF_MMVQ_KERNEL(iq4_nl, vdot_iq4_nl)
