// lstm_cudnn: the whole LSTM stack as one tape node over cuDNN's RNN calls. This file holds the
// checks, the preparation of the inputs and the backward wiring; the cuDNN calls themselves live in
// cuda/cudnn/cudnn_lstm.cpp behind the kernel table's cudnn_lstm slot, so this file builds without CUDA.
// Under autocast, float32 inputs run in the autocast type inside the one node: converted on the
// way in, the outputs and gradients converted back, the weights converted only when they are packed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "amp/policy.h"
#include "backend/cudnn_lstm.h"
#include "ops/op_helpers.h"
#include "tapegrad/amp/autocast.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/rnn.h"

namespace tapegrad {

using namespace ops;

namespace {

constexpr const char* kOp = "lstm (cudnn)";

struct StackSizes {
  int64_t steps, batch, input_size, hidden, layers, directions;
  int64_t states() const { return layers * directions; }
};

StackSizes check_inputs(const Tensor& x, const Tensor& h0, const Tensor& c0, const std::vector<Tensor>& weights,
                        const CudnnLstmOptions& options) {
  check_defined(kOp, x, "input");
  TG_CHECK(x.device().is_cuda(), kOp,
           ": the cuDNN LSTM needs CUDA tensors; use the default implementation on the CPU "
           "(the input is on ",
           x.device(), ")");
  TG_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat64 || x.dtype() == kFloat16 || x.dtype() == kBFloat16, kOp,
           ": cuDNN's LSTM runs in float32, float64, float16 or bfloat16, got ", x.dtype());
  TG_CHECK(x.dim() == 3, kOp, ": input must be 3-D (", options.batch_first ? "[B, T, I]" : "[T, B, I]", "), got ",
           shape_str(x.sizes()));
  TG_CHECK(options.num_layers >= 1, kOp, ": num_layers must be >= 1, got ", options.num_layers);
  TG_CHECK(options.dropout >= 0 && options.dropout < 1, kOp, ": dropout must be in [0, 1), got ", options.dropout);

  StackSizes s;
  s.steps = options.batch_first ? x.size(1) : x.size(0);
  s.batch = options.batch_first ? x.size(0) : x.size(1);
  s.input_size = x.size(2);
  s.layers = options.num_layers;
  s.directions = options.bidirectional ? 2 : 1;
  TG_CHECK(s.steps <= INT32_MAX && s.batch <= INT32_MAX && s.input_size <= INT32_MAX, kOp,
           ": cuDNN takes int32 sizes, got input ", shape_str(x.sizes()));
  const size_t per_stack = static_cast<size_t>(s.states());
  TG_CHECK(weights.size() == 2 * per_stack || weights.size() == 4 * per_stack, kOp, ": expected ", 2 * per_stack,
           " weights (no bias) or ", 4 * per_stack, " (with bias) for ", s.layers, " layer(s) and ", s.directions,
           " direction(s), got ", weights.size());
  const size_t per_direction = weights.size() / per_stack;
  for (size_t i = 0; i < weights.size(); ++i) {
    check_defined(kOp, weights[i], "a weight");
    check_same_device(kOp, x, weights[i]);
    TG_CHECK(weights[i].dtype() == x.dtype(), kOp, ": all tensors must share the input's dtype ", x.dtype(), ", got ",
             weights[i].dtype());
  }
  const Tensor& w_hh0 = weights[1];
  TG_CHECK(w_hh0.dim() == 2 && w_hh0.size(1) > 0 && w_hh0.size(0) == 4 * w_hh0.size(1), kOp,
           ": weight_hh must be [4H, H], got ", shape_str(w_hh0.sizes()));
  s.hidden = w_hh0.size(1);
  const int64_t gates = 4 * s.hidden;
  for (int64_t k = 0; k < s.states(); ++k) {
    const int64_t in = k < s.directions ? s.input_size : s.hidden * s.directions;
    const size_t first = static_cast<size_t>(k) * per_direction;
    const Tensor& w_ih = weights[first];
    const Tensor& w_hh = weights[first + 1];
    TG_CHECK(w_ih.sizes() == (Shape{gates, in}), kOp, ": weight_ih of layer ", k / s.directions,
             k % s.directions ? " (reverse)" : "", " should be [", gates, ", ", in, "], got ", shape_str(w_ih.sizes()));
    TG_CHECK(w_hh.sizes() == (Shape{gates, s.hidden}), kOp, ": weight_hh of layer ", k / s.directions,
             k % s.directions ? " (reverse)" : "", " should be [", gates, ", ", s.hidden, "], got ",
             shape_str(w_hh.sizes()));
    for (size_t j = 2; j < per_direction; ++j)
      TG_CHECK(weights[first + j].sizes() == (Shape{gates}), kOp, ": bias should be [", gates, "], got ",
               shape_str(weights[first + j].sizes()));
  }
  const Shape state_shape{s.states(), s.batch, s.hidden};
  for (const Tensor* state : {&h0, &c0}) {
    if (!state->defined()) continue;
    check_same_device(kOp, x, *state);
    TG_CHECK(state->dtype() == x.dtype(), kOp, ": all tensors must share the input's dtype ", x.dtype(), ", got ",
             state->dtype());
    TG_CHECK(state->sizes() == state_shape, kOp, ": initial state ", shape_str(state->sizes()), " should be ",
             shape_str(state_shape));
  }
  return s;
}

// The lengths as the cuDNN kernels take them: int32 [B] on the CPU, T where none were given.
Tensor host_lengths(const Tensor& lengths, const StackSizes& s) {
  if (!lengths.defined())
    return tensor<int32_t>(std::vector<int32_t>(static_cast<size_t>(s.batch), static_cast<int32_t>(s.steps)),
                           {s.batch});
  TG_CHECK(lengths.dim() == 1 && lengths.size(0) == s.batch, kOp, ": lengths must be [", s.batch, "], got ",
           shape_str(lengths.sizes()));
  TG_CHECK(lengths.dtype() == kInt64 || lengths.dtype() == kInt32, kOp, ": lengths must be integers, got ",
           lengths.dtype());
  std::vector<int32_t> values;
  for (int64_t v : lengths.detach().tolist<int64_t>()) {
    TG_CHECK(v >= 0 && v <= s.steps, kOp, ": sequence length ", v, " is outside [0, ", s.steps, "]");
    values.push_back(static_cast<int32_t>(v));
  }
  return tensor<int32_t>(values, {s.batch});
}

// No step to run (T = 0 or B = 0): the final state is the initial one, the output is empty.
LstmStackOutput empty_stack(const Tensor& h0, const Tensor& c0, const Shape& output_shape, const Shape& state_shape,
                            const TensorOptions& like) {
  LstmStackOutput out;
  out.output = zeros(output_shape, like);
  out.h_n = h0.defined() ? h0.clone() : zeros(state_shape, like);
  out.c_n = c0.defined() ? c0.clone() : zeros(state_shape, like);
  return out;
}

// t in `dtype`, contiguous, without autograd.
Tensor as_run_type(const Tensor& t, DType dtype) {
  Tensor d = t.detach();
  return (d.dtype() == dtype ? d : d.to(dtype)).contiguous();
}

bool same_stack(const CudnnWeightCache& c, const backend::CudnnLstmShape& shape, DType dtype) {
  return c.dtype == dtype && c.input_size == shape.input_size && c.hidden_size == shape.hidden_size &&
         c.num_layers == shape.num_layers && c.bidirectional == shape.bidirectional && c.has_bias == shape.has_bias;
}

// The cached space when it was packed from exactly these weights as they are now, else null.
std::shared_ptr<Storage> cached_space(CudnnWeightCache& cache, const std::vector<Tensor>& weights,
                                      const backend::CudnnLstmShape& shape, DType dtype) {
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (!cache.space || !same_stack(cache, shape, dtype) || cache.sources.size() != weights.size()) return nullptr;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Tensor& w = weights[i];
    const CudnnWeightCache::Source& s = cache.sources[i];
    if (!w.is_contiguous() || s.storage.lock() != w.storage() || s.offset != w.storage_offset() ||
        s.version != w.storage()->version())
      return nullptr;
  }
  ++cache.reuses;
  return cache.space;
}

// Remembers `space` as packed from `weights` at their current versions (read before the packing).
void remember_space(CudnnWeightCache& cache, const std::vector<CudnnWeightCache::Source>& sources,
                    const backend::CudnnLstmShape& shape, DType dtype, std::shared_ptr<Storage> space) {
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.sources = sources;
  cache.dtype = dtype;
  cache.input_size = shape.input_size;
  cache.hidden_size = shape.hidden_size;
  cache.num_layers = shape.num_layers;
  cache.bidirectional = shape.bidirectional;
  cache.has_bias = shape.has_bias;
  cache.space = std::move(space);
  ++cache.packs;
}

}  // namespace

std::shared_ptr<CudnnWeightCache> make_cudnn_weight_cache() {
  return std::make_shared<CudnnWeightCache>();
}

LstmStackOutput lstm_cudnn(const Tensor& x, const Tensor& h0, const Tensor& c0, const std::vector<Tensor>& weights,
                           const CudnnLstmOptions& options, const Tensor& lengths) {
  const StackSizes s = check_inputs(x, h0, c0, weights, options);
  const backend::CudnnLstmKernels* kernels = backend::kernels(x.device()).cudnn_lstm;
  TG_CHECK(kernels != nullptr && kernels->forward != nullptr && kernels->backward != nullptr, kOp,
           ": no cuDNN LSTM on ", x.device(), " (this build or machine has no CUDA backend)");
  const Device device = x.device();
  const DType dtype = x.dtype();
  const DType run = amp::autocast_inputs(amp::AutocastOp::lstm, {&x}).products;  // what cuDNN computes in
  const TensorOptions like = TensorOptions(dtype).device(device);
  const Shape output_shape = options.batch_first ? Shape{s.batch, s.steps, s.hidden * s.directions}
                                                 : Shape{s.steps, s.batch, s.hidden * s.directions};
  const Shape state_shape{s.states(), s.batch, s.hidden};
  Tensor host_lens = host_lengths(lengths, s);
  if (s.steps == 0 || s.batch == 0) return empty_stack(h0, c0, output_shape, state_shape, like);

  backend::CudnnLstmForwardArgs args;
  args.shape.input_size = s.input_size;
  args.shape.hidden_size = s.hidden;
  args.shape.num_layers = s.layers;
  args.shape.bidirectional = options.bidirectional;
  args.shape.has_bias = weights.size() == 4 * static_cast<size_t>(s.states());
  args.shape.batch_first = options.batch_first;
  args.shape.dropout = options.dropout;
  args.shape.dropout_seed = options.dropout_seed;
  args.x = as_run_type(x, run);
  if (h0.defined()) args.hx = as_run_type(h0, run);
  if (c0.defined()) args.cx = as_run_type(c0, run);
  CudnnWeightCache* cache = options.weight_cache.get();
  if (cache != nullptr) args.packed_weights = cached_space(*cache, weights, args.shape, run);
  std::vector<CudnnWeightCache::Source> sources;
  if (!args.packed_weights) {
    for (const Tensor& w : weights) {
      sources.push_back({w.storage(), w.storage_offset(), w.storage()->version()});
      args.weights.push_back(as_run_type(w, run));
    }
  }
  args.lengths = host_lens;

  std::vector<Tensor> inputs{x, h0, c0};
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  const bool record_node = any_requires_grad(inputs);
  // Training mode keeps cuDNN's reserve space for backward; dropout also needs it to act at all.
  args.training = record_node || (options.dropout > 0 && s.layers > 1);
  args.y = empty_tensor(output_shape, run, device);
  args.hy = empty_tensor(state_shape, run, device);
  args.cy = empty_tensor(state_shape, run, device);

  backend::CudnnLstmContext context;
  kernels->forward(args, &context);
  const bool contiguous_weights =
      std::all_of(weights.begin(), weights.end(), [](const Tensor& w) { return w.is_contiguous(); });
  if (cache != nullptr && !args.packed_weights && contiguous_weights)
    remember_space(*cache, sources, args.shape, run, context.weight_space);

  LstmStackOutput out{as_run_type(args.y, dtype), as_run_type(args.hy, dtype), as_run_type(args.cy, dtype)};
  if (!record_node) return out;

  bool weights_need_grad = false;
  std::vector<Shape> weight_shapes;
  std::vector<DType> weight_dtypes;
  for (const Tensor& w : weights) {
    weights_need_grad = weights_need_grad || w.requires_grad();
    weight_shapes.push_back(w.sizes());
    weight_dtypes.push_back(w.dtype());
  }
  // What backward needs, without the weights: they are already packed in the context's space.
  SavedTensor saved_x = args.x, saved_hx = args.hx, saved_cx = args.cx, saved_y = args.y;
  backend::CudnnLstmShape shape = args.shape;
  record(kOp, inputs, {out.output, out.h_n, out.c_n}, [=](const std::vector<Tensor>& grads) {
    backend::CudnnLstmBackwardArgs b;
    b.forward.shape = shape;
    b.forward.x = saved_x.get();
    b.forward.hx = saved_hx.get();
    b.forward.cx = saved_cx.get();
    b.forward.y = saved_y.get();
    b.forward.lengths = host_lens;
    b.forward.training = true;
    b.context = context;
    b.dy = as_run_type(grads[0], run);
    b.dhy = as_run_type(grads[1], run);
    b.dcy = as_run_type(grads[2], run);
    b.dx = empty_tensor(b.forward.x.sizes(), run, device);
    if (b.forward.hx.defined()) b.dhx = empty_tensor(state_shape, run, device);
    if (b.forward.cx.defined()) b.dcx = empty_tensor(state_shape, run, device);
    if (weights_need_grad)
      for (const Shape& ws : weight_shapes) b.weight_grads.push_back(empty_tensor(ws, run, device));
    kernels->backward(b);

    // Gradients in their inputs' dtypes (float32 under autocast).
    auto back = [](const Tensor& g, DType to) { return g.defined() ? as_run_type(g, to) : g; };
    std::vector<Tensor> result{back(b.dx, dtype), back(b.dhx, dtype), back(b.dcx, dtype)};
    for (size_t i = 0; i < weight_shapes.size(); ++i)
      result.push_back(weights_need_grad ? back(b.weight_grads[i], weight_dtypes[i]) : Tensor());
    return result;
  });
  return out;
}

}  // namespace tapegrad
