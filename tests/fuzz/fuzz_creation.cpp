// Fuzzes the creation and view ops with extreme sizes (see creation_sizes_case.h): any size
// product that overflows must throw tapegrad::Error before anything is allocated.
#include <cstdio>
#include <cstdlib>

#include "creation_sizes_case.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string problem = creation_sizes::run(data, size);
  if (!problem.empty()) {
    std::fprintf(stderr, "fuzz_creation: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
