// The whole public API in one include.
#pragma once

#include "tapegrad/autograd/engine.h"
#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/core/device.h"
#include "tapegrad/core/dtype.h"
#include "tapegrad/core/error.h"
#include "tapegrad/core/generator.h"
#include "tapegrad/core/tensor.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/indexing.h"
#include "tapegrad/ops/join.h"
#include "tapegrad/ops/linalg.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/reduction.h"
#include "tapegrad/runtime.h"
