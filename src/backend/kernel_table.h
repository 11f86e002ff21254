// The dispatch table: one typed function-pointer slot per kernel per device kind. Each backend
// fills its table in an explicit register_*_backend() call. An empty slot is an Error naming the
// kernel and device, never a crash or a silent fallback.
//
// Kernel contract: ops have already checked shapes, dtypes and devices, allocated outputs, and
// broadcast inputs (expanded views, stride 0) to the output's shape. Kernels never see gradients
// as such. Unless a kernel's comment says it accumulates, it overwrites its output.
#pragma once

#include <cstdint>
#include <vector>

#include "tapegrad/core/error.h"
#include "tapegrad/core/storage.h"
#include "math/optim.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::backend {

enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Relu, Gelu, Square };
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp { Sum, Mean, Max, Min };

const char* unary_op_name(UnaryOp op);

// One parameter's tensors for the multi-tensor optimiser slots (undefined where unused).
struct SgdTensors {
  Tensor param, grad, momentum_buffer;
};
struct AdamTensors {
  Tensor param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq;
};

struct CudnnLstmKernels;  // backend/cudnn_lstm.h
const char* binary_op_name(BinaryOp op);

struct KernelTable {
  Allocator* allocator = nullptr;

  // dst <- src with dtype conversion; same shape, any strides, both on this backend.
  void (*copy)(const Tensor& src, const Tensor& dst) = nullptr;
  // Between this device and the CPU (same shape and dtype; the CPU side contiguous).
  void (*copy_from_cpu)(const Tensor& src_cpu, const Tensor& dst) = nullptr;
  void (*copy_to_cpu)(const Tensor& src, const Tensor& dst_cpu) = nullptr;

  void (*fill)(const Tensor& out, double value) = nullptr;
  // out[i] = start + i * step over the flattened (contiguous) out.
  void (*arange)(const Tensor& out, double start, double step) = nullptr;
  // Philox draws: element i of contiguous `out` uses counter offset + i under key `seed`.
  void (*uniform)(const Tensor& out, double low, double high, uint64_t seed, uint64_t offset) = nullptr;
  void (*normal)(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) = nullptr;
  void (*randint)(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t offset) = nullptr;

  void (*unary)(UnaryOp op, const Tensor& x, const Tensor& out) = nullptr;
  // grad_x = grad * f'(x), given x and y = f(x).
  void (*unary_backward)(UnaryOp op, const Tensor& grad, const Tensor& x, const Tensor& y,
                         const Tensor& grad_x) = nullptr;
  // out = a (op) b; a, b and out share one dtype (the ops promote first). `out` may alias `a`.
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  // out (bool) = a (op) b; a and b share one dtype.
  void (*compare)(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  void (*where)(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) = nullptr;
  void (*clamp)(const Tensor& x, double min, double max, const Tensor& out) = nullptr;

  // `x` contiguous, viewed as [outer, reduced, inner]; out contiguous [outer, inner].
  void (*reduce)(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced,
                 int64_t inner) = nullptr;
  // Max or Min with the first index (int64) where it occurs; same layout as reduce.
  void (*reduce_with_index)(ReduceOp op, const Tensor& x, const Tensor& values, const Tensor& indices,
                            int64_t outer, int64_t reduced, int64_t inner) = nullptr;

  // out = alpha * a @ b + beta * out for 2-D a [n, k], b [k, m], out [n, m]. beta = 1 accumulates.
  void (*gemm)(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) = nullptr;
  // The same per batch for 3-D tensors.
  void (*bmm)(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) = nullptr;

  // Over the last dim of contiguous [rows, cols]; `log` selects log_softmax.
  void (*softmax)(const Tensor& x, const Tensor& out, bool log) = nullptr;
  // grad_x from grad_out and the forward output y.
  void (*softmax_backward)(const Tensor& grad_out, const Tensor& y, const Tensor& grad_x, bool log) = nullptr;
  // Per-row losses [N] and logsumexp [N] for logits [N, C] contiguous and int64 targets [N];
  // rows whose target is ignore_index get loss 0. Targets were range-checked by the op.
  void (*cross_entropy)(const Tensor& logits, const Tensor& target, const Tensor& losses,
                        const Tensor& logsumexp, int64_t ignore_index, double label_smoothing) = nullptr;
  // grad_logits [N, C] = grad_losses[n] * d(loss_n)/d(logits[n]).
  void (*cross_entropy_backward)(const Tensor& grad_losses, const Tensor& logits, const Tensor& target,
                                 const Tensor& logsumexp, const Tensor& grad_logits, int64_t ignore_index,
                                 double label_smoothing) = nullptr;

  // out = x.index_select(dim, index); index int64 1-D, already range-checked.
  void (*index_select)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = nullptr;
  // Accumulates: out.index_add_(dim, index, src).
  void (*index_add)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = nullptr;
  void (*gather)(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = nullptr;
  // Accumulates: out.scatter_add_(dim, index, src).
  void (*scatter_add)(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = nullptr;

  // The LSTM cell at one timestep, for a batch [B] of rows; `lengths` (int64 [B], may be undefined)
  // marks rows whose sequence has ended at time t: their state passes through unchanged.
  // Forward: gates [B, 4H] holds pre-activations and is overwritten with the activations;
  // writes c_new and h_new [B, H].
  void (*lstm_cell_forward)(const Tensor& gates, const Tensor& h_prev, const Tensor& c_prev, const Tensor& h_new,
                            const Tensor& c_new, const Tensor& lengths, int64_t t) = nullptr;
  // Backward: dh [B, H] holds the gradient of h_new and is overwritten with the part of dh_prev that
  // bypasses the recurrent GEMM (nonzero only for finished rows); dc [B, H] is updated in place
  // from dc_new to dc_prev; overwrites dgates [B, 4H] with the pre-activation gradients.
  void (*lstm_cell_backward)(const Tensor& gates, const Tensor& c_prev, const Tensor& c_new, const Tensor& dh,
                             const Tensor& dc, const Tensor& dgates, const Tensor& lengths, int64_t t) = nullptr;

  // A layer's whole recurrence, for a backend that runs it better than lstm_layer's loop of one
  // gemm and one cell call per step (optional; the CPU splits the batch across threads). Step s
  // runs time t = reverse ? T-1-s : s; all tensors contiguous except grad_h_all.
  // Forward: x [T, B, I]; w_t = [W_ih^T; W_hh^T], [I + H, 4H]; bias [4H] (undefined: none).
  // Writes every step's activated gates [T, B, 4H] (pre-activations [x_t, h_{t-1}] w_t + bias,
  // then the cell), h_all and c_all [T, B, H].
  void (*lstm_recurrence_forward)(const Tensor& x, const Tensor& w_t, const Tensor& bias, const Tensor& h0,
                                  const Tensor& c0, const Tensor& gates, const Tensor& h_all, const Tensor& c_all,
                                  const Tensor& lengths, bool reverse) = nullptr;
  // Backward: gates holds the activations; grad_h_all [T, B, H] (any strides) is the gradient of
  // h_all; dh and dc [B, H] hold the gradients of the last state and end as those of h0 and c0;
  // writes every step's dgates [T, B, 4H] and, when defined, grad_bias [4H] (their sum).
  void (*lstm_recurrence_backward)(const Tensor& gates, const Tensor& w_hh, const Tensor& c0, const Tensor& c_all,
                                   const Tensor& grad_h_all, const Tensor& dh, const Tensor& dc, const Tensor& dgates,
                                   const Tensor& grad_bias, const Tensor& lengths, bool reverse) = nullptr;

  // One fused pass per parameter (param, grad and state read once, written once); all contiguous,
  // one dtype. momentum_buffer / max_exp_avg_sq are undefined when unused. Update in place.
  void (*sgd_step)(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                   const math::SgdHyper& hyper) = nullptr;
  void (*adam_step)(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const Tensor& max_exp_avg_sq, const math::AdamHyper& hyper) = nullptr;

  // The same updates for many parameters sharing one set of hyperparameters, in one or a few
  // passes (on CUDA: launches covering many tensors at once). Optimisers prefer these when set.
  void (*sgd_step_many)(const std::vector<SgdTensors>& params, const math::SgdHyper& hyper) = nullptr;
  void (*adam_step_many)(const std::vector<AdamTensors>& params, const math::AdamHyper& hyper) = nullptr;

  // cuDNN's LSTM (CUDA only), an alternative to lstm_layer's fused cell; see backend/cudnn_lstm.h.
  const CudnnLstmKernels* cudnn_lstm = nullptr;
};

// The table of one device kind (both backends registered on first use).
const KernelTable& kernels(DeviceKind kind);
inline const KernelTable& kernels(Device device) { return kernels(device.kind()); }
// Writable access for a backend's register function.
KernelTable& mutable_kernels(DeviceKind kind);

[[noreturn]] void missing_kernel(const char* kernel, DeviceKind kind);

// Registration entry points, called once by kernels().
void register_cpu_backend();
void register_cuda_backend();  // a no-op in a build without CUDA

}  // namespace tapegrad::backend

// The kernel `slot` of the backend for `device`, or an Error: "no cuda kernel for softmax".
#define TG_KERNEL(device, slot)                                                                 \
  ([&]() {                                                                                      \
    auto fn_ = ::tapegrad::backend::kernels(device).slot;                                      \
    if (fn_ == nullptr) ::tapegrad::backend::missing_kernel(#slot, (device).kind());            \
    return fn_;                                                                                 \
  }())
