// The one way a test skips without a GPU: ctest then counts the case as skipped, not passed.
#pragma once

#include <gtest/gtest.h>

#include "tapegrad/tapegrad.h"

#define SKIP_WITHOUT_GPU() \
  if (!::tapegrad::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine"
