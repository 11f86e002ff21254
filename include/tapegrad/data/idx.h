// read_idx: loads an IDX file (the MNIST/Fashion-MNIST format), plain or gzip-compressed.
#pragma once

#include <string>

#include "tapegrad/core/tensor.h"

namespace tapegrad {

// Reads an IDX file: two zero bytes, a type byte, a rank byte (1..4), `rank` big-endian uint32
// dims, then the big-endian data. Gzip files (1f 8b) are decompressed transparently.
// Returns a CPU tensor with the declared dims: int32 for 0x08 (uint8), 0x09 (int8), 0x0B (int16)
// and 0x0C (int32); float32 for 0x0D; float64 for 0x0E.
// Throws tapegrad::Error (naming the path) for a missing file, a bad magic/type/rank, a size that
// overflows, a truncated file (expected vs actual bytes) or trailing bytes after the data.
Tensor read_idx(const std::string& path);

}  // namespace tapegrad
