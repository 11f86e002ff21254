// The AMX tile kernel of the bf16 products (Note [AMX products] in sbgemm_amx.cpp). Internal to
// sbgemm.cpp, which converts A, packs B and chooses the kernel.
#pragma once

#include <cstdint>

namespace tapegrad::cpu::amx {

// Rows of A and depth pairs of B come in multiples of these (zero-padded by the caller).
constexpr int64_t kTileRows = 16;
constexpr int64_t kTilePairs = 16;

// Whether this CPU has AMX-TILE and AMX-BF16, this build the kernel, and the operating system
// granted this process the tile state (asked once, on the first call).
bool available();

// Where a product's last sums are rounded to instead of C: bf16 rows ld apart (none when c is null).
struct Bf16Output {
  uint16_t* c = nullptr;
  int64_t ld = 0;
};

// C (m x n float32, leading dimension ldc) = alpha * A B + beta * C for the 32-column panels
// [panel_begin, panel_end) of B. a: bf16 rows lda values apart (lda = 2 * pairs), at least
// round_up(m, kTileRows) rows, zeros past m rows and past the depth. panels: B's pair panels as
// PackedBf16Matrix lays them out, each `pairs` (a multiple of kTilePairs) pair-rows of 32 columns.
// beta = 0 never reads C. With `rounded`, the result goes to it, rounded to bf16, instead of to C,
// which then holds only the partial sums of a depth longer than one block. Runs on the calling thread.
void product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda, const uint16_t* panels,
             float beta, float* c, int64_t ldc, int64_t panel_begin, int64_t panel_end, const Bf16Output& rounded = {});

}  // namespace tapegrad::cpu::amx
