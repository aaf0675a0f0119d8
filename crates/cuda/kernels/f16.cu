// GGML_TYPE_F16 (id 1): IEEE binary16.
GGUF_FN float deq_f16(const uint8_t *b, int j) { return h2f(ld_u16(b)); }
GGUF_DEQUANTIZE_KERNEL(f16, 1, 2, deq_f16)
GGUF_MMV_KERNEL(f16, 1, 2, deq_f16)
