// GGML_TYPE_Q8_1 (id 9), 36 bytes: the activation format. quantize_q8_1 is
// quantize_row_q8_1_ref per 32-element block (one warp per block): d = amax / 127,
// codes roundf(x * (1 / d)), s = d * sum(codes), both fp16.
GGUF_FN float deq_q8_1(const uint8_t *b, int j) { return q8_1_d(b) * (float)(int8_t)b[4 + j]; }
GGUF_DEQUANTIZE_KERNEL(q8_1, 32, 36, deq_q8_1)
#ifndef GGUF_HOST
// x: n floats (n a multiple of 32); y: n / 32 blocks. 128 threads per block, one warp per
// q8_1 block.
extern "C" __global__ void quantize_q8_1(const float *__restrict__ x, uint8_t *__restrict__ y, int64_t n) {
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (blk * 32 >= n) return; // the whole warp
    const float v = x[blk * 32 + lane];
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const int q = (int)roundf(v * id);
    uint8_t *b = y + blk * Q8_1_BYTES;
    b[4 + lane] = (uint8_t)(int8_t)q;
    // The sum of the codes is an exact integer; d * sum rounds once, as in the reference.
    float sum = (float)q;
    sum = warp_sum(sum);
    if (lane == 0) {
        const uint16_t dh = f2h(d), sh = f2h(sum * d);
        b[0] = (uint8_t)dh; b[1] = (uint8_t)(dh >> 8);
        b[2] = (uint8_t)sh; b[3] = (uint8_t)(sh >> 8);
    }
}
#endif
