// Fuzzes the string parsers users hand command-line text to: Device ("cuda:1") and DType
// ("float32"). Valid text must round-trip through str(); anything else throws tapegrad::Error.
#include <cstdlib>
#include <string>

#include "tapegrad/core/device.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tapegrad::Device device(text);
    if (tapegrad::Device(device.str()) != device) std::abort();
  } catch (const tapegrad::Error&) {
  }
  try {
    tapegrad::DType dtype = tapegrad::parse_dtype(text);
    if (tapegrad::parse_dtype(tapegrad::dtype_name(dtype)) != dtype) std::abort();
  } catch (const tapegrad::Error&) {
  }
  return 0;
}
