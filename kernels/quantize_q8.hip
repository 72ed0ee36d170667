// Activation rounding before the integer mat-vec: f32 values to the
// Q8-packed layout (q8_packed.h), as the CPU quantizes a row for Q4_0 /
// Q8_0 (and Q8_1) weights. One wave per block of 32 values, lane i holding
// value i: loads are one coalesced 128-byte read per wave.
#include "shapes.h"
#include "q8_packed.h"

#define QUANTIZE_WG 256u

KERNEL LAUNCH_BOUNDS(QUANTIZE_WG) void quantize_q8(const float* x, int8_t* quants,
                                                   float2* scales, QuantizeShape s) {
    uint32_t b = block_id_x() * (QUANTIZE_WG / WAVE_SIZE) + wave_id();
    if (b >= s.n / 32u) {
        return; // wave-uniform: whole waves leave
    }
    wave_store_q8_packed(x[32u * b + lane_id()], quants, scales, b);
}
