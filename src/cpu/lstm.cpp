// The fused LSTM cell on the CPU: one pass over [B, H] per timestep, parallel over rows.
#include "cpu/cpu_kernels.h"
#include "cpu/dtype_dispatch.h"
#include "cpu/parallel.h"
#include "math/lstm.h"

namespace tapegrad::cpu {

namespace {
bool row_active(const int64_t* lengths, int64_t b, int64_t t) { return lengths == nullptr || t < lengths[b]; }
int64_t rows_grain(int64_t hidden) { return std::max<int64_t>(1, 2048 / std::max<int64_t>(hidden, 1)); }
}  // namespace

// Overwrites gates (with activations), h_new and c_new. All contiguous.
void lstm_cell_forward(const Tensor& gates, const Tensor& h_prev, const Tensor& c_prev, const Tensor& h_new,
                       const Tensor& c_new, const Tensor& lengths, int64_t t) {
  const int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  const int64_t* len = lengths.defined() ? static_cast<const int64_t*>(lengths.data_ptr()) : nullptr;
  dispatch_floating(gates.dtype(), "lstm_cell_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* z = static_cast<T*>(gates.data_ptr());
    const T* hp = static_cast<const T*>(h_prev.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    T* hn = static_cast<T*>(h_new.data_ptr());
    T* cn = static_cast<T*>(c_new.data_ptr());
    parallel_for(0, batch, rows_grain(hidden), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        T* zr = z + b * 4 * hidden;
        const int64_t r = b * hidden;
        if (!row_active(len, b, t)) {
          for (int64_t j = 0; j < hidden; ++j) {
            hn[r + j] = hp[r + j];
            cn[r + j] = cp[r + j];
          }
          for (int64_t j = 0; j < 4 * hidden; ++j) zr[j] = T(0);
          continue;
        }
        for (int64_t j = 0; j < hidden; ++j)
          math::lstm_cell_forward<T>(zr[j], zr[hidden + j], zr[2 * hidden + j], zr[3 * hidden + j], cp[r + j],
                                     &cn[r + j], &hn[r + j]);
      }
    });
  });
}

// Overwrites dgates and dh (with the bypass part), updates dc in place.
void lstm_cell_backward(const Tensor& gates, const Tensor& c_prev, const Tensor& c_new, const Tensor& dh,
                        const Tensor& dc, const Tensor& dgates, const Tensor& lengths, int64_t t) {
  const int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  const int64_t* len = lengths.defined() ? static_cast<const int64_t*>(lengths.data_ptr()) : nullptr;
  dispatch_floating(gates.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* a = static_cast<const T*>(gates.data_ptr());
    const T* cp = static_cast<const T*>(c_prev.data_ptr());
    const T* cn = static_cast<const T*>(c_new.data_ptr());
    T* dhp = static_cast<T*>(dh.data_ptr());
    T* dcp = static_cast<T*>(dc.data_ptr());
    T* dz = static_cast<T*>(dgates.data_ptr());
    parallel_for(0, batch, rows_grain(hidden), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* ar = a + b * 4 * hidden;
        T* dzr = dz + b * 4 * hidden;
        const int64_t r = b * hidden;
        if (!row_active(len, b, t)) {  // state passed through: so do its gradients
          for (int64_t j = 0; j < 4 * hidden; ++j) dzr[j] = T(0);
          continue;
        }
        for (int64_t j = 0; j < hidden; ++j) {
          math::lstm_cell_backward<T>(ar[j], ar[hidden + j], ar[2 * hidden + j], ar[3 * hidden + j], cp[r + j],
                                      cn[r + j], dhp[r + j], &dcp[r + j], &dzr[j], &dzr[hidden + j],
                                      &dzr[2 * hidden + j], &dzr[3 * hidden + j]);
          dhp[r + j] = T(0);  // an active row's dh_prev comes only through the recurrent GEMM
        }
      }
    });
  });
}

}  // namespace tapegrad::cpu
