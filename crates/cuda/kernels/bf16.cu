// GGML_TYPE_BF16 (id 30): the top 16 bits of a binary32.
GGUF_FN float deq_bf16(const uint8_t *b, int j) { return bf2f(ld_u16(b)); }
GGUF_DEQUANTIZE_KERNEL(bf16, 1, 2, deq_bf16)
GGUF_MMV_KERNEL(bf16, 1, 2, deq_bf16)
