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

// C (m x n float32, leading dimension ldc) = alpha * A B + beta * C for the 32-column panels
// [panel_begin, panel_end) of B. a: bf16 rows lda values apart (lda = 2 * pairs), at least
// round_up(m, kTileRows) rows, zeros past m rows and past the depth. panels: B's pair panels as
// PackedBf16Matrix lays them out, each `pairs` (a multiple of kTilePairs) pair-rows of 32 columns.
// beta = 0 never reads C. Runs on the calling thread.
void product(int64_t m, int64_t n, int64_t pairs, float alpha, const uint16_t* a, int64_t lda, const uint16_t* panels,
             float beta, float* c, int64_t ldc, int64_t panel_begin, int64_t panel_end);

}  // namespace tapegrad::cpu::amx
