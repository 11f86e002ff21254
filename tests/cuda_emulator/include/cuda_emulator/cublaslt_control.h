// Emulation build: what tests may ask the emulated cuBLASLt directly (a test uses it to see that a
// product really ran through an epilogue rather than a fallback). Nothing in the library includes it.
#pragma once

#include <cstdint>

namespace tapegrad_emu {

// cublasLtMatmul calls accepted so far in this process with this epilogue (a cublasLtEpilogue_t
// value, e.g. CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_BGRADB = 512).
int64_t cublaslt_matmul_count(unsigned epilogue);

}  // namespace tapegrad_emu
