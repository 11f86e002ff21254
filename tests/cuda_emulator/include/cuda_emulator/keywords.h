// Emulation build: CUDA's execution-space keywords, for code compiled by the host compiler. Every
// emulated CUDA header includes this, as every real one brings them in.
#pragma once

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
