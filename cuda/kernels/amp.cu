// GradScaler's fused found-inf check and unscale on the GPU (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_): every gradient of one device in a few multi-tensor
// launches (multi_tensor_apply.cuh), one sequence per dtype. The scale's inverse is read from
// device memory and the flag written there, so nothing waits for the host: GradScaler reads the
// flag once per step. The per-element formula is src/math/amp.h, the CPU's.
#include <map>

#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/multi_tensor_apply.cuh"
#include "math/amp.h"
#include "register.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

namespace {

// Each block unscales one chunk of one gradient. A block that saw inf or NaN stores 1 into the
// flag: every such store writes the same value, so their order does not matter (PyTorch's kernel
// does the same), and a block that saw none never writes.
template <class T>
__global__ void unscale_many_kernel(TensorListMetadata<1> meta, float* found_inf, const float* inv_scale) {
  using A = Acc<T>;
  const BlockChunk c = block_chunk(meta);
  T* g = static_cast<T*>(meta.addresses[0][c.tensor]);
  const float inv = *inv_scale;
  bool non_finite = false;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
    const A v = convert<A>(g[i]);
    non_finite = non_finite || !math::is_finite(v);
    g[i] = convert<T>(math::unscale_value(v, inv));
  }
  if (non_finite) *found_inf = 1.0f;
}

void non_finite_check_and_unscale(const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale) {
  const char* op = "non_finite_check_and_unscale";
  TG_ASSERT(found_inf.dtype() == kFloat32 && found_inf.numel() == 1 && inv_scale.dtype() == kFloat32 &&
                inv_scale.numel() == 1 && found_inf.device().is_cuda() && inv_scale.device() == found_inf.device(),
            op, ": found_inf and inv_scale must be one-element float32 tensors on one cuda device");
  std::map<DType, std::vector<TensorGroup<1>>> by_dtype;
  for (const Tensor& g : grads) {
    TG_CHECK(g.dtype() == kFloat32 || g.dtype() == kFloat64 || g.dtype() == kFloat16 || g.dtype() == kBFloat16, op,
             ": gradients must be float32, float64, float16 or bfloat16, got ", g.dtype());
    TG_ASSERT(g.is_contiguous() && g.device() == found_inf.device(), op,
              ": gradient not contiguous or not on found_inf's device");
    by_dtype[g.dtype()].push_back({{g.data_ptr()}, g.numel()});
  }
  cuda::DeviceGuard guard(found_inf.device());
  float* flag = static_cast<float*>(found_inf.data_ptr());
  const float* inv = static_cast<const float*>(inv_scale.data_ptr());
  for (const auto& group : by_dtype) {
    dispatch_floating_and_half(group.first, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      multi_tensor_apply<1>(group.second, [&](const TensorListMetadata<1>& meta, int blocks) {
        TG_LAUNCH_KERNEL(blocks, kMultiTensorThreads, 0, current_stream(), unscale_many_kernel<T>)(meta, flag, inv);
        TG_CUDA_CHECK_LAUNCH(op);
      });
    });
  }
}

}  // namespace

void register_amp(backend::KernelTable& table) {
  table.non_finite_check_and_unscale = non_finite_check_and_unscale;
}

}  // namespace tapegrad::cuda_backend
