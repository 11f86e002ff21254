// The weights of a CPU LSTM layer in the layouts its recurrence multiplies by, reused inside a
// WeightLayoutScope (Note [kept weight layouts], backend/weight_layouts.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/gemm/sbgemm.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::cpu {

// What the forward recurrence reads: w_t = [W_ih^T; W_hh^T] as one [I + H, 4H] matrix, its bf16
// packing when the products run in bf16, and b_ih + b_hh (undefined: no bias). With `panels`
// (float32 weights and products through sgemm_avx512), w_t laid out as that kernel's panels
// instead (Note [B laid out once for many products] in sgemm_avx512.cpp), and w_t left undefined.
struct ForwardWeights {
  Tensor w_t;
  Tensor w_t_panels;  // sgemm_b_panels_floats(I + H, 4H) floats
  PackedBf16Matrix w_t_bf16;
  Tensor bias;
};
std::shared_ptr<const ForwardWeights> forward_weights(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                      const Tensor& b_hh, DType products, bool panels = false);

// W_hh [4H, H] packed for the backward's bf16 products dh_prev += dgates W_hh.
std::shared_ptr<const PackedBf16Matrix> backward_w_hh_bf16(const Tensor& w_hh);

// W_hh [4H, H] (float32) laid out as sgemm_avx512's panels for the backward's float32 products
// dh_prev += dgates W_hh (Note [recurrent weights laid out as panels] in lstm.cpp):
// sgemm_b_panels_floats(4H, H) floats.
std::shared_ptr<const Tensor> backward_w_hh_panels(const Tensor& w_hh);

// Note [unit panels]: at batch 1 each step reads every weight once, so the recurrence runs at the
// speed L2 streams them. It streams a sequential block about 1.6 times as fast as the same bytes in
// pieces of rows (a thread's 256 B of each gate's 2 KiB row: 2.5 against 1.5 us per step at
// I = 32, H = 128 on a Zen 5 core). So the batch-1 path keeps each thread's columns contiguous:
// thread p of `parts` owns units [u0, u1) (unit_range) and its weights are panels of at most 64
// units, each panel [rows, 4 * units] = the four gates' columns of those units side by side, row
// after row. Sixteen registers hold a panel's outputs (Note [segmented columns]).
struct UnitRange {
  int64_t begin, end;
};
constexpr int64_t kUnitsPerVector = 16;
// Part `part` of `parts` of [0, hidden): the parts start at multiples of 16 and the last takes the
// rest, so one thread's vector loops over a row's units cover the same positions as the parts'.
UnitRange unit_range(int64_t hidden, int parts, int part);

struct UnitPanel {
  int part;
  int64_t u0, units;  // its units [u0, u0 + units)
  Tensor data;        // forward: [I + H, 4 * units]; backward: [4H, units]
};
// The forward's panels of [W_ih^T; W_hh^T] for `parts` threads, in part order, and b_ih + b_hh
// (undefined: no bias).
struct ForwardUnitPanels {
  std::vector<UnitPanel> panels;
  Tensor bias;
};
std::shared_ptr<const ForwardUnitPanels> forward_unit_panels(const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                                             const Tensor& b_hh, int parts);
// The backward's dh_prev += dgates W_hh reads W_hh [4H, H] by columns: each part's columns
// [u0, u1) as one contiguous [4H, u1 - u0] panel (one panel per part; with one part, W_hh itself
// when it is contiguous).
struct BackwardUnitPanels {
  std::vector<UnitPanel> panels;
};
std::shared_ptr<const BackwardUnitPanels> backward_unit_panels(const Tensor& w_hh, int parts);

}  // namespace tapegrad::cpu
