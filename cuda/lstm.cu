// The fused LSTM cell on the GPU: one launch per timestep and direction, one thread per
// (row, hidden unit) handling its four gates, with the arithmetic of src/math/lstm.h (the CPU's).
// Gates are laid out [B, 4H] with gate q of unit j at q * H + j, as PyTorch and cuDNN order them.
// 16-bit tensors are computed in f32.
#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "math/lstm.h"
#include "register.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

namespace {

// A row whose sequence ended before time t passes its state through (the CPU's rule).
__device__ __forceinline__ bool row_active(const int64_t* lengths, int64_t row, int64_t t) {
  return lengths == nullptr || t < lengths[row];
}

// Overwrites gates [B, 4H] (pre-activations in, activations out), h_new and c_new [B, H].
template <class T>
__global__ void lstm_cell_forward_kernel(T* gates, const T* h_prev, const T* c_prev, T* h_new, T* c_new,
                                         const int64_t* lengths, int64_t t, int64_t batch, int64_t hidden) {
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
    A zi = convert<A>(z[0]), zf = convert<A>(z[hidden]), zg = convert<A>(z[2 * hidden]), zo = convert<A>(z[3 * hidden]);
    A c, h;
    math::lstm_cell_forward<A>(zi, zf, zg, zo, convert<A>(c_prev[idx]), &c, &h);
    z[0] = convert<T>(zi);
    z[hidden] = convert<T>(zf);
    z[2 * hidden] = convert<T>(zg);
    z[3 * hidden] = convert<T>(zo);
    c_new[idx] = convert<T>(c);
    h_new[idx] = convert<T>(h);
  }
}

// Overwrites dgates [B, 4H] and dh [B, H] (with the part of dh_prev that bypasses the recurrent
// GEMM); updates dc [B, H] in place from dc_new to dc_prev.
template <class T>
__global__ void lstm_cell_backward_kernel(const T* gates, const T* c_prev, const T* c_new, T* dh, T* dc, T* dgates,
                                          const int64_t* lengths, int64_t t, int64_t batch, int64_t hidden) {
  using A = Acc<T>;
  TG_GRID_STRIDE_LOOP(idx, batch * hidden) {
    const int64_t row = idx / hidden, j = idx - row * hidden;
    const int64_t gate = row * 4 * hidden + j;
    T* dz = dgates + gate;
    if (!row_active(lengths, row, t)) {  // state passed through: so do dh and dc
      for (int q = 0; q < 4; ++q) dz[q * hidden] = convert<T>(A(0));
      continue;
    }
    const T* a = gates + gate;
    A dc_acc = convert<A>(dc[idx]);
    A dzi, dzf, dzg, dzo;
    math::lstm_cell_backward<A>(convert<A>(a[0]), convert<A>(a[hidden]), convert<A>(a[2 * hidden]),
                                convert<A>(a[3 * hidden]), convert<A>(c_prev[idx]), convert<A>(c_new[idx]),
                                convert<A>(dh[idx]), &dc_acc, &dzi, &dzf, &dzg, &dzo);
    dz[0] = convert<T>(dzi);
    dz[hidden] = convert<T>(dzf);
    dz[2 * hidden] = convert<T>(dzg);
    dz[3 * hidden] = convert<T>(dzo);
    dc[idx] = convert<T>(dc_acc);
    dh[idx] = convert<T>(A(0));  // an active row's dh_prev comes only through the recurrent GEMM
  }
}

void check_cell_tensors(const char* op, std::initializer_list<const Tensor*> tensors, const Tensor& lengths) {
  for (const Tensor* t : tensors) TG_ASSERT(t->is_contiguous(), op, ": expects contiguous tensors");
  TG_ASSERT(!lengths.defined() || (lengths.dtype() == kInt64 && lengths.is_contiguous()), op,
            ": lengths must be contiguous int64");
}

const int64_t* lengths_ptr(const Tensor& lengths) {
  return lengths.defined() ? static_cast<const int64_t*>(lengths.data_ptr()) : nullptr;
}

void lstm_cell_forward(const Tensor& gates, const Tensor& h_prev, const Tensor& c_prev, const Tensor& h_new,
                       const Tensor& c_new, const Tensor& lengths, int64_t t) {
  const char* op = "lstm_cell_forward";
  check_cell_tensors(op, {&gates, &h_prev, &c_prev, &h_new, &c_new}, lengths);
  const int64_t batch = c_prev.size(0), hidden = c_prev.size(1), n = batch * hidden;
  if (n == 0) return;
  cuda::DeviceGuard guard(gates.device());
  dispatch_floating_and_half(gates.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, current_stream(), lstm_cell_forward_kernel<T>)
    (static_cast<T*>(gates.data_ptr()), static_cast<const T*>(h_prev.data_ptr()),
     static_cast<const T*>(c_prev.data_ptr()), static_cast<T*>(h_new.data_ptr()), static_cast<T*>(c_new.data_ptr()),
     lengths_ptr(lengths), t, batch, hidden);
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

void lstm_cell_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c_new, const Tensor& dh,
                        const Tensor& dc, const Tensor& dgates, const Tensor& lengths, int64_t t) {
  const char* op = "lstm_cell_backward";
  check_cell_tensors(op, {&gates, &c_prev, &c_new, &dh, &dc, &dgates}, lengths);
  const int64_t batch = c_prev.size(0), hidden = c_prev.size(1), n = batch * hidden;
  if (n == 0) return;
  cuda::DeviceGuard guard(gates.device());
  dispatch_floating_and_half(gates.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, current_stream(), lstm_cell_backward_kernel<T>)
    (static_cast<const T*>(gates.data_ptr()), static_cast<const T*>(c_prev.data_ptr()),
     static_cast<const T*>(c_new.data_ptr()), static_cast<T*>(dh.data_ptr()), static_cast<T*>(dc.data_ptr()),
     static_cast<T*>(dgates.data_ptr()), lengths_ptr(lengths), t, batch, hidden);
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace

void register_lstm(backend::KernelTable& table) {
  table.lstm_cell_forward = lstm_cell_forward;
  table.lstm_cell_backward = lstm_cell_backward;
}

}  // namespace tapegrad::cuda_backend
