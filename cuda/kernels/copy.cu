// copy: dst <- src with dtype conversion, any strides, every pair of dtypes (16-bit floats convert
// through float, anything to bool is `!= 0`), both tensors on the same CUDA device. clone, contiguous,
// to(dtype), cat and stack all come through here.
#include "kernels/dispatch.h"
#include "kernels/pointwise_loop.cuh"
#include "register.h"

namespace tapegrad::cuda_backend {

namespace {

template <class To, class From>
struct ConvertFn {
  __device__ To operator()(From v) const { return convert<To>(v); }
};

// Overwrites dst. Conversions match the CPU's (round to nearest even into 16-bit floats, truncation
// into integers); float-to-integer conversions of NaN or out-of-range values are undefined in C++
// and may differ between the devices (the GPU saturates).
void copy(const Tensor& src, const Tensor& dst) {
  TG_CHECK(src.device() == dst.device(), "copy: the cuda kernel copies within one device, got ", src.device(), " and ",
           dst.device());
  if (src.numel() == 0) return;
  cuda::DeviceGuard guard(dst.device());  // kernels launch on the current device
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    // A plain byte copy: the copy engine's own path, no kernel. Overlap cannot occur here (copy_
    // clones an overlapping source first).
    cuda::note_copy();
    TG_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), src.numel() * src.itemsize(),
                                  cudaMemcpyDeviceToDevice, current_stream()),
                  "copy");
    return;
  }
  dispatch_all(dst.dtype(), "copy", [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    dispatch_all(src.dtype(), "copy", [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      launch_pointwise<D, S>("copy", ConvertFn<D, S>{}, dst, src);
    });
  });
}

}  // namespace

void register_copy(backend::KernelTable& table) {
  table.copy = copy;
}

}  // namespace tapegrad::cuda_backend
