// A layer's whole LSTM recurrence on the GPU: the lstm_recurrence_forward/backward slots (contract
// in backend/kernel_slots.def, design and limits in docs/lstm_cuda.md).
//
// Note [persistent recurrence]: for a small batch each step is a tiny product ([B, H] x [H, 4H]),
// so one launch per step costs more than its arithmetic. One cooperative kernel runs the whole
// sequence instead: block g owns hidden units [g U, g U + U), keeps the four gates' columns of
// W_hh for them in shared memory for every step, computes its gates for every row, applies the
// cell and writes its slice of h_t and c_t; one grid-wide barrier per step makes h_t whole before
// any block reads it. Backward is the mirror: a block's cell gives dgates for its units, the
// barrier makes dgates[t] whole, and the block multiplies it by its units' columns of W_hh to get
// its slice of dh_{t-1} (so its next cell needs no barrier). The input projection of every step
// is one GEMM up front. Above kPersistentMaxBatch rows, or where the grid cannot be resident at
// once (H too large for shared memory), or for 16-bit tensors, each step is one GEMM plus one
// fused cell launch instead.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "backend/kernel_tensors.h"
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "math/lstm.h"
#include "register.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

using backend::data_or_null;
using backend::mutable_data_or_null;

namespace {

namespace cg = cooperative_groups;

constexpr int kPersistentThreads = 128;
// Batches up to this run the persistent kernel. Its products run on the CUDA cores: at H = 512 a
// step of 32 rows is 32 * 512 * 2048 ~ 34M multiply-adds, ~2 us spread over the device, about one
// launch's cost; beyond that the per-step GEMM on the tensor cores wins (docs/lstm_cuda.md).
constexpr int64_t kPersistentMaxBatch = 32;
// Hidden units per block at least: fewer blocks make the grid barrier cheaper, and 8 units keep a
// block's 32 gate columns busy over its 4 warps.
constexpr int64_t kMinUnitsPerBlock = 8;
// Rows of h_{t-1} (forward) or dgates[t] (backward) staged in shared memory at once.
constexpr int kForwardRowChunk = 8;
constexpr int kBackwardRowChunk = 4;

__device__ __forceinline__ bool row_active(const int64_t* lengths, int64_t row, int64_t t) {
  return lengths == nullptr || t < lengths[row];
}

// b_ih + b_hh at gate column i (either may be null: none), added in that order as the CPU does.
template <class A, class T>
__device__ __forceinline__ A bias_at(const T* b_ih, const T* b_hh, int64_t i) {
  return (b_ih != nullptr ? convert<A>(b_ih[i]) : A(0)) + (b_hh != nullptr ? convert<A>(b_hh[i]) : A(0));
}

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The forward's arguments. T: the tensors' type (float or double); W: the products' operand type
// (T, or __nv_bfloat16 for bf16 products, summed in float).
template <class T>
struct ForwardArgs {
  const T* w_hh;         // [4H, H]
  const T *b_ih, *b_hh;  // [4H] each, or null
  const T *h0, *c0;      // [B, H]
  T* gates;              // [T, B, 4H]: the input projections in, the activations out
  T *h_all, *c_all;      // [T, B, H]
  const int64_t* lengths;
  int64_t steps, batch, hidden, units;
  bool reverse;
};

// Shared memory: z [B][4U] (A), then the block's W_hh^T columns [4U][H] and a chunk of h [rows][H] (W).
template <class A, class W>
size_t forward_shared_bytes(int64_t batch, int64_t hidden, int64_t units) {
  return sizeof(A) * batch * 4 * units + sizeof(W) * (4 * units + kForwardRowChunk) * hidden;
}

template <class T, class W>
__global__ void __launch_bounds__(kPersistentThreads) lstm_persistent_forward_kernel(ForwardArgs<T> p) {
  using A = Acc<T>;
  const int64_t H = p.hidden, B = p.batch, U = p.units, cols = 4 * U, width = 4 * H;
  const int64_t j0 = blockIdx.x * U, own = min(U, H - j0);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  TG_DYNAMIC_SHARED(unsigned char, shared);
  A* z_s = reinterpret_cast<A*>(shared);
  W* w_s = reinterpret_cast<W*>(z_s + B * cols);  // column q U + u: W_hh^T[:, q H + j0 + u], a row of W_hh
  W* h_s = w_s + cols * H;
  for (int64_t i = tid; i < cols * H; i += blockDim.x) {  // k fastest: W_hh's rows read in order
    const int64_t k = i % H, col = i / H, q = col / U, u = col % U;
    w_s[col * H + k] = convert<W>(u < own ? convert<A>(p.w_hh[(q * H + j0 + u) * H + k]) : A(0));
  }
  cg::grid_group grid = cg::this_grid();
  for (int64_t s = 0; s < p.steps; ++s) {
    const int64_t t = p.reverse ? p.steps - 1 - s : s, tp = p.reverse ? t + 1 : t - 1;
    const T* h_prev = s == 0 ? p.h0 : p.h_all + tp * B * H;
    const T* c_prev = s == 0 ? p.c0 : p.c_all + tp * B * H;
    // z[b][col] = h_prev[b] . W_hh^T[:, col]: a warp per column, lanes across k.
    for (int64_t r0 = 0; r0 < B; r0 += kForwardRowChunk) {
      const int rows = static_cast<int>(min(int64_t{kForwardRowChunk}, B - r0));
      // __ldcg: other blocks wrote h_prev before the barrier; L1 may hold stale lines.
      for (int64_t i = tid; i < rows * H; i += blockDim.x) h_s[i] = convert<W>(__ldcg(h_prev + r0 * H + i));
      __syncthreads();
      for (int64_t col = warp; col < cols; col += warps) {
        A acc[kForwardRowChunk] = {};
        const W* wc = w_s + col * H;
        for (int64_t k = lane; k < H; k += 32) {
          const A w = convert<A>(wc[k]);
#pragma unroll
          for (int r = 0; r < kForwardRowChunk; ++r)
            if (r < rows) acc[r] += w * convert<A>(h_s[r * H + k]);
        }
#pragma unroll
        for (int r = 0; r < kForwardRowChunk; ++r) {
          if (r >= rows) break;  // the same for every lane
          const A v = warp_sum(acc[r]);
          if (lane == 0) z_s[(r0 + r) * cols + col] = v;
        }
      }
      __syncthreads();
    }
    T* z_t = p.gates + t * B * width;
    T* h_new = p.h_all + t * B * H;
    T* c_new = p.c_all + t * B * H;
    for (int64_t i = tid; i < B * own; i += blockDim.x) {
      const int64_t b = i / own, u = i - b * own, j = j0 + u, at = b * H + j;
      T* z = z_t + b * width + j;
      if (!row_active(p.lengths, b, t)) {  // the CPU's rule: the state passes through, gates are 0
        h_new[at] = h_prev[at];
        c_new[at] = c_prev[at];
        for (int q = 0; q < 4; ++q) z[q * H] = convert<T>(A(0));
        continue;
      }
      A g[4];
      for (int q = 0; q < 4; ++q)
        g[q] = convert<A>(z[q * H]) + z_s[b * cols + q * U + u] + bias_at<A>(p.b_ih, p.b_hh, q * H + j);
      A c, h;
      math::lstm_cell_forward<A>(g[0], g[1], g[2], g[3], convert<A>(c_prev[at]), &c, &h);
      for (int q = 0; q < 4; ++q) z[q * H] = convert<T>(g[q]);
      c_new[at] = convert<T>(c);
      h_new[at] = convert<T>(h);
    }
    if (s + 1 < p.steps) grid.sync();  // h_t whole before any block stages it
  }
}

template <class T>
struct BackwardArgs {
  const T* gates;  // activations [T, B, 4H]
  const T* w_hh;   // [4H, H]
  const T *c0, *c_all;
  const T* grad_h;  // [T, B, H] with strides gs0, gs1, gs2; null: zeros
  int64_t gs0, gs1, gs2;
  const T *grad_h_n, *grad_c_n;  // [B, H] with strides (hs0, hs1), (cs0, cs1); null: zeros
  int64_t hs0, hs1, cs0, cs1;
  T *dh, *dc;                // [B, H]: start as grad_h_n, grad_c_n, end as the gradients of h0, c0
  T* dgates;                 // [T, B, 4H]
  T *grad_b_ih, *grad_b_hh;  // [4H] each, or null
  const int64_t* lengths;
  int64_t steps, batch, hidden, units;
  bool reverse;
};

// Shared memory: the block's W_hh columns [U][4H] and a chunk of dgates [rows][4H] (W).
template <class W>
size_t backward_shared_bytes(int64_t hidden, int64_t units) {
  return sizeof(W) * (units + kBackwardRowChunk) * 4 * hidden;
}

// At least one block per multiprocessor is all a persistent grid needs (shared memory, not
// registers, limits how many fit): without that bound ptxas kept the f32 kernel at 72 registers and
// spilled 20 bytes; with it, 128 registers and no spill.
template <class T, class W>
__global__ void __launch_bounds__(kPersistentThreads, 1) lstm_persistent_backward_kernel(BackwardArgs<T> p) {
  using A = Acc<T>;
  const int64_t H = p.hidden, B = p.batch, U = p.units, width = 4 * H;
  const int64_t j0 = blockIdx.x * U, own = min(U, H - j0);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  TG_DYNAMIC_SHARED(unsigned char, shared);
  W* w_s = reinterpret_cast<W*>(shared);  // [U][4H]: W_hh[:, j0 + u]
  W* dz_s = w_s + U * width;
  for (int64_t i = tid; i < U * width; i += blockDim.x) {
    const int64_t u = i % U, c = i / U;
    w_s[u * width + c] = convert<W>(u < own ? convert<A>(p.w_hh[c * H + j0 + u]) : A(0));
  }
  // The running state gradients of this block's units start as the last state's: only this block
  // reads or writes them, so no grid barrier is needed.
  for (int64_t i = tid; i < B * own; i += blockDim.x) {
    const int64_t b = i / own, j = j0 + i - b * own;
    p.dh[b * H + j] = p.grad_h_n != nullptr ? p.grad_h_n[b * p.hs0 + j * p.hs1] : convert<T>(A(0));
    p.dc[b * H + j] = p.grad_c_n != nullptr ? p.grad_c_n[b * p.cs0 + j * p.cs1] : convert<T>(A(0));
  }
  __syncthreads();
  cg::grid_group grid = cg::this_grid();
  for (int64_t s = p.steps - 1; s >= 0; --s) {
    const int64_t t = p.reverse ? p.steps - 1 - s : s, tp = p.reverse ? t + 1 : t - 1;
    const T* c_prev = s == 0 ? p.c0 : p.c_all + tp * B * H;
    const T* c_new = p.c_all + t * B * H;
    const T* a_t = p.gates + t * B * width;
    T* dz_t = p.dgates + t * B * width;
    // The cell for this block's units. dh holds the gradient of h_t from step t + 1's product.
    for (int64_t i = tid; i < B * own; i += blockDim.x) {
      const int64_t b = i / own, u = i - b * own, j = j0 + u, at = b * H + j;
      const A dh_total =
          convert<A>(p.dh[at]) + (p.grad_h != nullptr ? convert<A>(p.grad_h[t * p.gs0 + b * p.gs1 + j * p.gs2]) : A(0));
      T* dz = dz_t + b * width + j;
      if (!row_active(p.lengths, b, t)) {  // state passed through: so do dh and dc
        for (int q = 0; q < 4; ++q) dz[q * H] = convert<T>(A(0));
        p.dh[at] = convert<T>(dh_total);
        continue;
      }
      const T* a = a_t + b * width + j;
      A dc = convert<A>(p.dc[at]), dzi, dzf, dzg, dzo;
      math::lstm_cell_backward<A>(convert<A>(a[0]), convert<A>(a[H]), convert<A>(a[2 * H]), convert<A>(a[3 * H]),
                                  convert<A>(c_prev[at]), convert<A>(c_new[at]), dh_total, &dc, &dzi, &dzf, &dzg, &dzo);
      dz[0] = convert<T>(dzi);
      dz[H] = convert<T>(dzf);
      dz[2 * H] = convert<T>(dzg);
      dz[3 * H] = convert<T>(dzo);
      p.dc[at] = convert<T>(dc);
      p.dh[at] = convert<T>(A(0));  // an active row's dh_{t-1} comes only through the product below
    }
    grid.sync();  // dgates[t] whole
    // dh[b][j0 + u] += dgates[t][b] . W_hh[:, j0 + u]: a warp per unit, lanes across the 4H gates.
    for (int64_t r0 = 0; r0 < B; r0 += kBackwardRowChunk) {
      const int rows = static_cast<int>(min(int64_t{kBackwardRowChunk}, B - r0));
      for (int64_t i = tid; i < rows * width; i += blockDim.x) dz_s[i] = convert<W>(__ldcg(dz_t + r0 * width + i));
      __syncthreads();
      for (int64_t u = warp; u < own; u += warps) {
        A acc[kBackwardRowChunk] = {};
        const W* wu = w_s + u * width;
        for (int64_t c = lane; c < width; c += 32) {
          const A w = convert<A>(wu[c]);
#pragma unroll
          for (int r = 0; r < kBackwardRowChunk; ++r)
            if (r < rows) acc[r] += w * convert<A>(dz_s[r * width + c]);
        }
#pragma unroll
        for (int r = 0; r < kBackwardRowChunk; ++r) {
          if (r >= rows) break;  // the same for every lane
          const A v = warp_sum(acc[r]);
          if (lane == 0) {
            T* d = p.dh + (r0 + r) * H + j0 + u;
            *d = convert<T>(convert<A>(*d) + v);
          }
        }
      }
      __syncthreads();
    }
  }
  // The bias gradient of this block's columns (b_ih's and b_hh's are the same): every step's
  // dgates there were written by this block.
  if (p.grad_b_ih != nullptr || p.grad_b_hh != nullptr) {
    for (int64_t i = tid; i < 4 * own; i += blockDim.x) {
      const int64_t col = (i / own) * H + j0 + i % own;
      double sum = 0;  // T * B terms, in double like the CPU's sums
      for (int64_t r = 0; r < p.steps * B; ++r) sum += static_cast<double>(convert<A>(p.dgates[r * width + col]));
      if (p.grad_b_ih != nullptr) p.grad_b_ih[col] = convert<T>(sum);
      if (p.grad_b_hh != nullptr) p.grad_b_hh[col] = convert<T>(sum);
    }
  }
}

// ---- The per-step path: one GEMM and one fused cell launch per step. ----

// gates [B, 4H] holds the projections plus the recurrent product; adds the biases, activates.
template <class T>
__global__ void lstm_step_forward_kernel(T* gates, const T* b_ih, const T* b_hh, const T* h_prev, const T* c_prev,
                                         T* h_new, T* c_new, const int64_t* lengths, int64_t t, int64_t batch,
                                         int64_t hidden) {
  using A = Acc<T>;
  TG_GRID_STRIDE_LOOP(idx, batch * hidden) {
    const int64_t row = idx / hidden, j = idx - row * hidden;
    T* z = gates + row * 4 * hidden + j;
    if (!row_active(lengths, row, t)) {
      h_new[idx] = h_prev[idx];
      c_new[idx] = c_prev[idx];
      for (int q = 0; q < 4; ++q) z[q * hidden] = convert<T>(A(0));
      continue;
    }
    A g[4];
    for (int q = 0; q < 4; ++q) g[q] = convert<A>(z[q * hidden]) + bias_at<A>(b_ih, b_hh, q * hidden + j);
    A c, h;
    math::lstm_cell_forward<A>(g[0], g[1], g[2], g[3], convert<A>(c_prev[idx]), &c, &h);
    for (int q = 0; q < 4; ++q) z[q * hidden] = convert<T>(g[q]);
    c_new[idx] = convert<T>(c);
    h_new[idx] = convert<T>(h);
  }
}

// The last state's gradients (null: zeros) and their strides, which the first step of the
// backward reads in place of dh and dc.
template <class T>
struct LastStateGrads {
  const T *h, *c;
  int64_t hs0, hs1, cs0, cs1;
};

// Adds step t's output gradient (any strides; null: zeros) to dh, then the cell backward
// (`math::lstm_cell_backward`). With `first` (the backward's first step) the running dh and dc are read from
// `last` instead; both are written either way.
template <class T>
__global__ void lstm_step_backward_kernel(const T* gates, const T* c_prev, const T* c_new, const T* grad_h_t,
                                          int64_t gs1, int64_t gs2, LastStateGrads<T> last, bool first, T* dh, T* dc,
                                          T* dgates, const int64_t* lengths, int64_t t, int64_t batch, int64_t hidden) {
  using A = Acc<T>;
  TG_GRID_STRIDE_LOOP(idx, batch * hidden) {
    const int64_t row = idx / hidden, j = idx - row * hidden, gate = row * 4 * hidden + j;
    A dh_in, dc_in;
    if (first) {
      dh_in = last.h != nullptr ? convert<A>(last.h[row * last.hs0 + j * last.hs1]) : A(0);
      dc_in = last.c != nullptr ? convert<A>(last.c[row * last.cs0 + j * last.cs1]) : A(0);
    } else {
      dh_in = convert<A>(dh[idx]);
      dc_in = convert<A>(dc[idx]);
    }
    const A dh_total = dh_in + (grad_h_t != nullptr ? convert<A>(grad_h_t[row * gs1 + j * gs2]) : A(0));
    T* dz = dgates + gate;
    if (!row_active(lengths, row, t)) {
      for (int q = 0; q < 4; ++q) dz[q * hidden] = convert<T>(A(0));
      dh[idx] = convert<T>(dh_total);
      dc[idx] = convert<T>(dc_in);
      continue;
    }
    const T* a = gates + gate;
    A dc_acc = dc_in, dzi, dzf, dzg, dzo;
    math::lstm_cell_backward<A>(convert<A>(a[0]), convert<A>(a[hidden]), convert<A>(a[2 * hidden]),
                                convert<A>(a[3 * hidden]), convert<A>(c_prev[idx]), convert<A>(c_new[idx]), dh_total,
                                &dc_acc, &dzi, &dzf, &dzg, &dzo);
    dz[0] = convert<T>(dzi);
    dz[hidden] = convert<T>(dzf);
    dz[2 * hidden] = convert<T>(dzg);
    dz[3 * hidden] = convert<T>(dzo);
    dc[idx] = convert<T>(dc_acc);
    dh[idx] = convert<T>(A(0));
  }
}

// out[c] and out2[c] (each unless null) = sum over rows of m[r][c], m [rows, cols] contiguous;
// one thread per column, in double.
template <class T>
__global__ void column_sum_kernel(const T* m, T* out, T* out2, int64_t rows, int64_t cols) {
  TG_GRID_STRIDE_LOOP(c, cols) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += static_cast<double>(convert<Acc<T>>(m[r * cols + c]));
    if (out != nullptr) out[c] = convert<T>(sum);
    if (out2 != nullptr) out2[c] = convert<T>(sum);
  }
}

// ---- Host side ----

const int64_t* lengths_ptr(const Tensor& lengths) {
  return lengths.defined() ? static_cast<const int64_t*>(lengths.data_ptr()) : nullptr;
}

// out = a @ b + beta * out with the step products in `products` (the slot's contract).
void gemm_products(const Tensor& a, const Tensor& b, const Tensor& out, double beta, DType products) {
  const Device device = out.device();
  if (products == out.dtype()) {
    TG_KERNEL(device, gemm)(a, b, out, 1.0, beta);
  } else {
    TG_KERNEL(device, gemm_mixed)(a, b, out, 1.0, beta, products);
  }
}

// The grid of a persistent kernel: blocks of `units` hidden units, or 0 blocks where it cannot
// run (shared memory above the device's opt-in limit, or a grid larger than can be resident).
struct PersistentGrid {
  int64_t units = 0, blocks = 0;
  size_t shared = 0;
};

template <class Kernel, class SharedBytes>
PersistentGrid plan_persistent(Kernel kernel, int64_t hidden, const SharedBytes& shared_bytes, const char* op) {
  int device = 0, sms = 0, optin = 0, cooperative = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device), op);
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device), op);
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), op);
  TG_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op);
  PersistentGrid g;
  if (cooperative == 0 || sms <= 0) return g;
  const int64_t units = std::max(kMinUnitsPerBlock, (hidden + sms - 1) / sms);
  const size_t shared = shared_bytes(units);
  if (shared > static_cast<size_t>(optin)) return g;
  TG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)),
                op);
  int per_sm = 0;
  TG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPersistentThreads, shared), op);
  const int64_t blocks = (hidden + units - 1) / units;
  if (blocks > int64_t{per_sm} * sms) return g;
  return PersistentGrid{units, blocks, shared};
}

// Whether the persistent kernels run these types: float or double tensors, products in their own
// type or bf16 for float.
bool persistent_types(DType dtype, DType products) {
  return (dtype == kFloat32 || dtype == kFloat64) &&
         (products == dtype || (products == kBFloat16 && dtype == kFloat32));
}

template <class T, class W>
bool forward_persistent(const ForwardArgs<T>& args) {
  const char* op = "lstm_recurrence_forward";
  auto kernel = lstm_persistent_forward_kernel<T, W>;
  const PersistentGrid g = plan_persistent(
      kernel, args.hidden,
      [&](int64_t units) { return forward_shared_bytes<Acc<T>, W>(args.batch, args.hidden, units); }, op);
  if (g.blocks == 0) return false;
  ForwardArgs<T> a = args;
  a.units = g.units;
  TG_CUDA_CHECK(TG_LAUNCH_COOPERATIVE_KERNEL(static_cast<unsigned>(g.blocks), kPersistentThreads, g.shared,
                                             current_stream(), lstm_persistent_forward_kernel<T, W>)(a),
                op);
  return true;
}

template <class T, class W>
bool backward_persistent(const BackwardArgs<T>& args) {
  const char* op = "lstm_recurrence_backward";
  auto kernel = lstm_persistent_backward_kernel<T, W>;
  const PersistentGrid g = plan_persistent(
      kernel, args.hidden, [&](int64_t units) { return backward_shared_bytes<W>(args.hidden, units); }, op);
  if (g.blocks == 0) return false;
  BackwardArgs<T> a = args;
  a.units = g.units;
  TG_CUDA_CHECK(TG_LAUNCH_COOPERATIVE_KERNEL(static_cast<unsigned>(g.blocks), kPersistentThreads, g.shared,
                                             current_stream(), lstm_persistent_backward_kernel<T, W>)(a),
                op);
  return true;
}

void lstm_recurrence_forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                             const Tensor& b_hh, const Tensor& h0, const Tensor& c0, const Tensor& gates,
                             const Tensor& h_all, const Tensor& c_all, const Tensor& lengths, bool reverse,
                             DType products) {
  const char* op = "lstm_recurrence_forward";
  const int64_t steps = gates.size(0), batch = gates.size(1), hidden = h0.size(1), input = x.size(2);
  if (steps == 0 || batch == 0 || hidden == 0) return;
  const Device device = gates.device();
  cuda::DeviceGuard guard(device);
  // Every step's input projection in one GEMM (W_ih read transposed where it is); the biases are
  // added by the cell.
  Tensor gates_2d = gates.view({steps * batch, 4 * hidden});
  if (input == 0) {
    TG_KERNEL(device, fill)(gates_2d, 0.0);
  } else {
    gemm_products(x.view({steps * batch, input}), w_ih.t(), gates_2d, 0.0, products);
  }
  const DType dtype = gates.dtype();
  bool done = false;
  if (batch <= kPersistentMaxBatch && persistent_types(dtype, products)) {
    dispatch_floating(dtype, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      ForwardArgs<T> a{static_cast<const T*>(w_hh.data_ptr()),
                       data_or_null<T>(b_ih),
                       data_or_null<T>(b_hh),
                       static_cast<const T*>(h0.data_ptr()),
                       static_cast<const T*>(c0.data_ptr()),
                       static_cast<T*>(gates.data_ptr()),
                       static_cast<T*>(h_all.data_ptr()),
                       static_cast<T*>(c_all.data_ptr()),
                       lengths_ptr(lengths),
                       steps,
                       batch,
                       hidden,
                       0,
                       reverse};
      if constexpr (std::is_same_v<T, float>) {
        done = products == kBFloat16 ? forward_persistent<T, __nv_bfloat16>(a) : forward_persistent<T, T>(a);
      } else {
        done = forward_persistent<T, T>(a);
      }
    });
  }
  if (done) return;
  // Per step: the recurrent product onto the projection, then the cell.
  const Tensor w_hh_t = w_hh.t();
  auto time = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
  dispatch_floating_and_half(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = time(s);
      const Tensor h_prev = s == 0 ? h0 : h_all.select(0, time(s - 1));
      const Tensor c_prev = s == 0 ? c0 : c_all.select(0, time(s - 1));
      const Tensor z = gates.select(0, t), h_new = h_all.select(0, t), c_new = c_all.select(0, t);
      gemm_products(h_prev, w_hh_t, z, 1.0, products);
      TG_LAUNCH_KERNEL(grid_for(batch * hidden), kBlockThreads, 0, current_stream(), lstm_step_forward_kernel<T>)
      (static_cast<T*>(z.data_ptr()), data_or_null<T>(b_ih), data_or_null<T>(b_hh),
       static_cast<const T*>(h_prev.data_ptr()), static_cast<const T*>(c_prev.data_ptr()),
       static_cast<T*>(h_new.data_ptr()), static_cast<T*>(c_new.data_ptr()), lengths_ptr(lengths), t, batch, hidden);
      TG_CUDA_CHECK_LAUNCH(op);
    }
  });
}

void lstm_recurrence_backward(const Tensor& gates, const Tensor& w_hh, const Tensor& c0, const Tensor& c_all,
                              const Tensor& grad_h_all, const Tensor& grad_h_n, const Tensor& grad_c_n,
                              const Tensor& dh, const Tensor& dc, const Tensor& dgates, const Tensor& grad_b_ih,
                              const Tensor& grad_b_hh, const Tensor& lengths, bool reverse, DType products) {
  const char* op = "lstm_recurrence_backward";
  const int64_t steps = gates.size(0), batch = gates.size(1), hidden = c0.size(1);
  const Device device = gates.device();
  cuda::DeviceGuard guard(device);
  if (steps == 0 || batch == 0 || hidden == 0) {  // no step: the state gradients pass through
    for (const Tensor* grad_bias : {&grad_b_ih, &grad_b_hh})
      if (grad_bias->defined() && grad_bias->numel() > 0) TG_KERNEL(device, fill)(*grad_bias, 0.0);
    const std::pair<const Tensor*, const Tensor*> states[] = {{&grad_h_n, &dh}, {&grad_c_n, &dc}};
    for (const auto& [from, to] : states) {
      if (to->numel() == 0) continue;
      if (from->defined())
        TG_KERNEL(device, copy)(*from, *to);
      else
        TG_KERNEL(device, fill)(*to, 0.0);
    }
    return;
  }
  const DType dtype = gates.dtype();
  const bool has_output_grad = grad_h_all.defined();
  const int64_t gs0 = has_output_grad ? grad_h_all.stride(0) : 0, gs1 = has_output_grad ? grad_h_all.stride(1) : 0,
                gs2 = has_output_grad ? grad_h_all.stride(2) : 0;
  bool done = false;
  if (batch <= kPersistentMaxBatch && persistent_types(dtype, products)) {
    dispatch_floating(dtype, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      BackwardArgs<T> a{static_cast<const T*>(gates.data_ptr()),
                        static_cast<const T*>(w_hh.data_ptr()),
                        static_cast<const T*>(c0.data_ptr()),
                        static_cast<const T*>(c_all.data_ptr()),
                        has_output_grad ? static_cast<const T*>(grad_h_all.data_ptr()) : nullptr,
                        gs0,
                        gs1,
                        gs2,
                        data_or_null<T>(grad_h_n),
                        data_or_null<T>(grad_c_n),
                        grad_h_n.defined() ? grad_h_n.stride(0) : 0,
                        grad_h_n.defined() ? grad_h_n.stride(1) : 0,
                        grad_c_n.defined() ? grad_c_n.stride(0) : 0,
                        grad_c_n.defined() ? grad_c_n.stride(1) : 0,
                        static_cast<T*>(dh.data_ptr()),
                        static_cast<T*>(dc.data_ptr()),
                        static_cast<T*>(dgates.data_ptr()),
                        mutable_data_or_null<T>(grad_b_ih),
                        mutable_data_or_null<T>(grad_b_hh),
                        lengths_ptr(lengths),
                        steps,
                        batch,
                        hidden,
                        0,
                        reverse};
      if constexpr (std::is_same_v<T, float>) {
        done = products == kBFloat16 ? backward_persistent<T, __nv_bfloat16>(a) : backward_persistent<T, T>(a);
      } else {
        done = backward_persistent<T, T>(a);
      }
    });
  }
  if (done) return;
  auto time = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
  dispatch_floating_and_half(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = has_output_grad ? static_cast<const T*>(grad_h_all.data_ptr()) : nullptr;
    const LastStateGrads<T> last{data_or_null<T>(grad_h_n),
                                 data_or_null<T>(grad_c_n),
                                 grad_h_n.defined() ? grad_h_n.stride(0) : 0,
                                 grad_h_n.defined() ? grad_h_n.stride(1) : 0,
                                 grad_c_n.defined() ? grad_c_n.stride(0) : 0,
                                 grad_c_n.defined() ? grad_c_n.stride(1) : 0};
    for (int64_t s = steps - 1; s >= 0; --s) {
      const int64_t t = time(s);
      const Tensor c_prev = s == 0 ? c0 : c_all.select(0, time(s - 1));
      const Tensor dz = dgates.select(0, t);
      TG_LAUNCH_KERNEL(grid_for(batch * hidden), kBlockThreads, 0, current_stream(), lstm_step_backward_kernel<T>)
      (static_cast<const T*>(gates.select(0, t).data_ptr()), static_cast<const T*>(c_prev.data_ptr()),
       static_cast<const T*>(c_all.select(0, t).data_ptr()), g != nullptr ? g + t * gs0 : nullptr, gs1, gs2, last,
       s == steps - 1, static_cast<T*>(dh.data_ptr()), static_cast<T*>(dc.data_ptr()), static_cast<T*>(dz.data_ptr()),
       lengths_ptr(lengths), t, batch, hidden);
      TG_CUDA_CHECK_LAUNCH(op);
      gemm_products(dz, w_hh, dh, 1.0, products);  // dh_{t-1} += dgates[t] W_hh
    }
    if (grad_b_ih.defined() || grad_b_hh.defined()) {
      TG_LAUNCH_KERNEL(grid_for(4 * hidden), kBlockThreads, 0, current_stream(), column_sum_kernel<T>)
      (static_cast<const T*>(dgates.data_ptr()), mutable_data_or_null<T>(grad_b_ih), mutable_data_or_null<T>(grad_b_hh),
       steps * batch, 4 * hidden);
      TG_CUDA_CHECK_LAUNCH(op);
    }
  });
}

}  // namespace

void register_lstm_recurrence(backend::KernelTable& table) {
  table.lstm_recurrence_forward = lstm_recurrence_forward;
  table.lstm_recurrence_backward = lstm_recurrence_backward;
}

}  // namespace tapegrad::cuda_backend
