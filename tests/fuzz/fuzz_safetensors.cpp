// Fuzzes the safetensors loader (header JSON, offsets, dtypes, shapes): any input must either load
// or throw tapegrad::Error; a crash, a sanitizer report or any other exception is a bug.
#include "fuzz_input_file.h"
#include "tapegrad/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzInputFile file;
  const std::string& path = file.write(data, size);
  try {
    for (auto& [name, t] : tapegrad::load_safetensors(path))
      if (t.numel() > 0 && t.dtype() != tapegrad::kBool) (void)t.to(tapegrad::kFloat64).sum().item();
  } catch (const tapegrad::Error&) {
  }
  try {
    (void)tapegrad::load_safetensors_metadata(path);
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
