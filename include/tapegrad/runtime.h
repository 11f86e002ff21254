// Process-wide runtime settings.
#pragma once

namespace tapegrad {

// Threads used by the CPU backend (our loops and OpenBLAS share one OpenMP pool); process-wide.
void set_num_threads(int threads);
int get_num_threads();

}  // namespace tapegrad
