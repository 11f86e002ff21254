// Fuzzes the safetensors header parser with many entries (see safetensors_many_case.h): a
// hostile header with 100,000 entries must parse in n log n time (libFuzzer's -timeout bounds
// each input) and either load or throw tapegrad::Error.
#include "fuzz_input_file.h"
#include "safetensors_many_case.h"
#include "tapegrad/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FuzzInputFile file;
  const std::string bytes = safetensors_many::build(data, size);
  const std::string& path = file.write(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  // The header is what is under test: it is parsed and validated in full by both calls; the
  // tensors themselves are read only for small counts, to keep the executions many.
  if (bytes.size() < 100000) {
    try {
      (void)tapegrad::load_safetensors(path);
    } catch (const tapegrad::Error&) {
    }
  }
  try {
    (void)tapegrad::load_safetensors_metadata(path);
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
