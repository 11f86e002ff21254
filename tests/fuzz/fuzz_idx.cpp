// Fuzzes read_idx (plain and gzip IDX files): any input must either load or throw tapegrad::Error;
// a crash, a sanitizer report, a hang or any other exception is a bug.
#include "fuzz_input_file.h"
#include "tapegrad/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzInputFile file;
  try {
    tapegrad::Tensor t = tapegrad::read_idx(file.write(data, size));
    if (t.numel() > 0) (void)t.to(tapegrad::kFloat64).sum().item();  // touch every element
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
