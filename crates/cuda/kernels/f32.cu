// GGML_TYPE_F32 (id 0): little-endian IEEE binary32.
GGUF_FN float deq_f32(const uint8_t *b, int j) { return bits_f32(ld_u32(b)); }
GGUF_DEQUANTIZE_KERNEL(f32, 1, 4, deq_f32)
GGUF_MMV_KERNEL(f32, 1, 4, deq_f32)
