// SGD and Adam/AdamW on the GPU: one fused kernel per parameter (sgd_step, adam_step), and the
// multi-tensor forms (sgd_step_many, adam_step_many) that update a whole model in a few launches
// (see multi_tensor_apply.cuh). The per-element update is src/math/optim.h, the CPU's; 16-bit
// parameters and their state are computed in f32 and stored back in their own dtype.
#include <array>
#include <map>
#include <utility>

#include "kernels/dispatch.h"
#include "kernels/launch.h"
#include "kernels/multi_tensor_apply.cuh"
#include "math/optim.h"
#include "register.h"
#include "tapegrad/cuda/device.h"

namespace tapegrad::cuda_backend {

namespace {

// Element i of one parameter. `buf` is null when momentum is off; on the first step its contents
// are uninitialised and only written.
template <class T>
__device__ __forceinline__ void sgd_element(T* p, const T* g, T* buf, int64_t i, const math::SgdHyper& h) {
  using A = Acc<T>;
  A param = convert<A>(p[i]);
  A momentum = buf != nullptr && !h.first_step ? convert<A>(buf[i]) : A(0);
  math::sgd_update<A>(param, convert<A>(g[i]), buf != nullptr ? &momentum : nullptr, h);
  p[i] = convert<T>(param);
  if (buf != nullptr) buf[i] = convert<T>(momentum);
}

// `v_max` is null unless amsgrad is on.
template <class T>
__device__ __forceinline__ void adam_element(T* p, const T* g, T* m, T* v, T* v_max, int64_t i,
                                             const math::AdamHyper& h) {
  using A = Acc<T>;
  A param = convert<A>(p[i]), exp_avg = convert<A>(m[i]), exp_avg_sq = convert<A>(v[i]);
  A max_sq = v_max != nullptr ? convert<A>(v_max[i]) : A(0);
  math::adam_update<A>(param, convert<A>(g[i]), exp_avg, exp_avg_sq, v_max != nullptr ? &max_sq : nullptr, h);
  p[i] = convert<T>(param);
  m[i] = convert<T>(exp_avg);
  v[i] = convert<T>(exp_avg_sq);
  if (v_max != nullptr) v_max[i] = convert<T>(max_sq);
}

template <class T>
__global__ void sgd_kernel(T* p, const T* g, T* buf, int64_t n, math::SgdHyper h) {
  TG_GRID_STRIDE_LOOP(i, n) sgd_element(p, g, buf, i, h);
}

template <class T>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, T* v_max, int64_t n, math::AdamHyper h) {
  TG_GRID_STRIDE_LOOP(i, n) adam_element(p, g, m, v, v_max, i, h);
}

// Capturable Adam's step counts, one thread each, before the update that reads them.
constexpr int kMaxStepCounts = 64;
struct StepCounts {
  float* counts[kMaxStepCounts];
  int n;
};

__global__ void increment_steps_kernel(StepCounts steps) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < steps.n) steps.counts[i][0] += 1.0f;
}

// Multi-tensor: addresses are (param, grad, momentum_buffer) and (param, grad, exp_avg,
// exp_avg_sq, max_exp_avg_sq); each block updates one chunk of one parameter.
template <class T>
__global__ void sgd_many_kernel(TensorListMetadata<3> meta, math::SgdHyper h) {
  const BlockChunk c = block_chunk(meta);
  T* p = static_cast<T*>(meta.addresses[0][c.tensor]);
  const T* g = static_cast<const T*>(meta.addresses[1][c.tensor]);
  T* buf = static_cast<T*>(meta.addresses[2][c.tensor]);
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) sgd_element(p, g, buf, i, h);
}

template <class T>
__global__ void adam_many_kernel(TensorListMetadata<5> meta, math::AdamHyper hyper) {
  const math::AdamHyper h = math::adam_hyper_resolved(hyper);
  const BlockChunk c = block_chunk(meta);
  T* p = static_cast<T*>(meta.addresses[0][c.tensor]);
  const T* g = static_cast<const T*>(meta.addresses[1][c.tensor]);
  T* m = static_cast<T*>(meta.addresses[2][c.tensor]);
  T* v = static_cast<T*>(meta.addresses[3][c.tensor]);
  T* v_max = static_cast<T*>(meta.addresses[4][c.tensor]);
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) adam_element(p, g, m, v, v_max, i, h);
}

// The optimisers pass contiguous tensors of the parameter's dtype, with state present exactly
// when the hyperparameters use it; anything else is our bug.
void check_state(const char* op, const Tensor& param, std::initializer_list<const Tensor*> state) {
  TG_ASSERT(param.is_contiguous(), op, ": parameter not contiguous");
  TG_ASSERT(param.device().is_cuda(), op, ": parameter not on a cuda device");
  for (const Tensor* t : state) {
    if (!t->defined()) continue;
    TG_ASSERT(t->is_contiguous() && t->dtype() == param.dtype() && t->numel() == param.numel(), op,
              ": state or gradient does not match its parameter");
  }
}

void* address_of(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const math::SgdHyper& hyper) {
  const char* op = "sgd_step";
  check_state(op, param, {&grad, &momentum_buffer});
  TG_ASSERT(hyper.momentum == 0 || momentum_buffer.defined(), op, ": momentum without a buffer");
  const int64_t n = param.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(param.device());
  dispatch_floating_and_half(param.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, current_stream(), sgd_kernel<T>)
    (static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
     static_cast<T*>(hyper.momentum != 0 ? momentum_buffer.data_ptr() : nullptr), n, hyper);
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const math::AdamHyper& hyper) {
  const char* op = "adam_step";
  check_state(op, param, {&grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
  TG_ASSERT(!hyper.amsgrad || max_exp_avg_sq.defined(), op, ": amsgrad without max_exp_avg_sq");
  const int64_t n = param.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(param.device());
  dispatch_floating_and_half(param.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    TG_LAUNCH_KERNEL(grid_for(n), kBlockThreads, 0, current_stream(), adam_kernel<T>)
    (static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()), static_cast<T*>(exp_avg.data_ptr()),
     static_cast<T*>(exp_avg_sq.data_ptr()), static_cast<T*>(hyper.amsgrad ? max_exp_avg_sq.data_ptr() : nullptr), n,
     hyper);
    TG_CUDA_CHECK_LAUNCH(op);
  });
}

// The kernels are typed and launch on one device, so a list that mixes dtypes or devices runs as
// one multi-tensor pass per (device, dtype). The optimisers already group that way.
using GroupKey = std::pair<int, DType>;

template <int Depth, class Entry, class Addresses>
std::map<GroupKey, std::vector<TensorGroup<Depth>>> groups_by_device_and_dtype(const std::vector<Entry>& entries,
                                                                               const Addresses& addresses) {
  std::map<GroupKey, std::vector<TensorGroup<Depth>>> groups;
  for (const Entry& e : entries)
    groups[{e.param.device().index(), e.param.dtype()}].push_back({addresses(e), e.param.numel()});
  return groups;
}

void sgd_step_many(const std::vector<backend::SgdTensors>& params, const math::SgdHyper& hyper) {
  const char* op = "sgd_step_many";
  for (const backend::SgdTensors& e : params) {
    check_state(op, e.param, {&e.grad, &e.momentum_buffer});
    TG_ASSERT(hyper.momentum == 0 || e.momentum_buffer.defined(), op, ": momentum without a buffer");
  }
  auto groups = groups_by_device_and_dtype<3>(params, [&](const backend::SgdTensors& e) {
    return std::array<void*, 3>{e.param.data_ptr(), e.grad.data_ptr(),
                                hyper.momentum != 0 ? address_of(e.momentum_buffer) : nullptr};
  });
  for (const auto& group : groups) {
    cuda::DeviceGuard guard(group.first.first);
    dispatch_floating_and_half(group.first.second, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      multi_tensor_apply<3>(group.second, [&](const TensorListMetadata<3>& meta, int blocks) {
        TG_LAUNCH_KERNEL(blocks, kMultiTensorThreads, 0, current_stream(), sgd_many_kernel<T>)(meta, hyper);
        TG_CUDA_CHECK_LAUNCH(op);
      });
    });
  }
}

// Capturable Adam: adds 1 to the step counts of the group's parameters on the device (one launch
// per 64 of them), and returns `hyper` pointing at the first count. Without counts, `hyper`.
math::AdamHyper increment_step_counts(const std::vector<backend::AdamTensors>& params, const GroupKey& key,
                                      math::AdamHyper hyper) {
  StepCounts steps{};
  auto flush = [&] {
    if (steps.n == 0) return;
    TG_LAUNCH_KERNEL(1, kMaxStepCounts, 0, current_stream(), increment_steps_kernel)(steps);
    TG_CUDA_CHECK_LAUNCH("adam_step_many");
    steps.n = 0;
  };
  for (const backend::AdamTensors& e : params) {
    if (!e.step.defined() || e.param.device().index() != key.first || e.param.dtype() != key.second) continue;
    TG_ASSERT(e.step.dtype() == kFloat32 && e.step.numel() == 1 && e.step.device() == e.param.device(),
              "adam_step_many: a step count that is not one float32 on the parameter's device");
    if (hyper.step == nullptr) hyper.step = static_cast<const float*>(e.step.data_ptr());
    steps.counts[steps.n++] = static_cast<float*>(e.step.data_ptr());
    if (steps.n == kMaxStepCounts) flush();
  }
  flush();
  return hyper;
}

void adam_step_many(const std::vector<backend::AdamTensors>& params, const math::AdamHyper& hyper) {
  const char* op = "adam_step_many";
  for (const backend::AdamTensors& e : params) {
    check_state(op, e.param, {&e.grad, &e.exp_avg, &e.exp_avg_sq, &e.max_exp_avg_sq});
    TG_ASSERT(!hyper.amsgrad || e.max_exp_avg_sq.defined(), op, ": amsgrad without max_exp_avg_sq");
  }
  auto groups = groups_by_device_and_dtype<5>(params, [&](const backend::AdamTensors& e) {
    return std::array<void*, 5>{e.param.data_ptr(), e.grad.data_ptr(), e.exp_avg.data_ptr(), e.exp_avg_sq.data_ptr(),
                                hyper.amsgrad ? address_of(e.max_exp_avg_sq) : nullptr};
  });
  for (const auto& group : groups) {
    cuda::DeviceGuard guard(group.first.first);
    const math::AdamHyper group_hyper = increment_step_counts(params, group.first, hyper);
    dispatch_floating_and_half(group.first.second, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      multi_tensor_apply<5>(group.second, [&](const TensorListMetadata<5>& meta, int blocks) {
        TG_LAUNCH_KERNEL(blocks, kMultiTensorThreads, 0, current_stream(), adam_many_kernel<T>)(meta, group_hyper);
        TG_CUDA_CHECK_LAUNCH(op);
      });
    });
  }
}

}  // namespace

void register_optim(backend::KernelTable& table) {
  table.sgd_step = sgd_step;
  table.adam_step = adam_step;
  table.sgd_step_many = sgd_step_many;
  table.adam_step_many = adam_step_many;
}

}  // namespace tapegrad::cuda_backend
