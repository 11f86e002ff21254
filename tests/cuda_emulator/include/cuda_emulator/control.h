// Emulation build: what tests may ask the emulator directly (the negative controls use it to see
// that a planted bug was caught). Nothing in the library includes this header.
#pragma once

#include <cstdint>
#include <string>

namespace tapegrad_emu {

// Violations of CUDA's rules found so far in this process (each is also printed to stderr, and the
// launch or copy it belongs to fails with an error the next synchronising call returns).
int64_t violation_count();
// The text of the most recent violation ("" when none).
std::string last_violation();
// Kernel launches the runtime was asked for so far in this process, valid or not (tapegrad's own
// launch counter is checked against it).
int64_t launches_seen();

}  // namespace tapegrad_emu
