// cuDNN's LSTM through the v8/v9 RNN API (cudnnRNNForward, cudnnRNNBackwardData_v8,
// cudnnRNNBackwardWeights_v8): the whole stack of layers and directions in one call each way.
// The parameters stay separate tensors (PyTorch's names and layout); each forward packs them into
// cuDNN's weight space, and backward scatters the weight-space gradient back.
//
// Note [packing cost]: one device-to-device copy per parameter (four when cuDNN does not keep a
// parameter's gates adjacent) per packing, plus a weight space the size of all parameters. That
// keeps the module's parameters, optimisers and state dicts identical under both LSTM
// implementations. A forward given an earlier space (CudnnLstmForwardArgs::packed_weights, from
// the op's CudnnWeightCache) packs nothing, so the copies happen once per optimiser step, not per
// forward.
//
// Note [math precision]: float32 runs with FMA math unless cuda::allow_tf32() is on (then cuDNN's
// default math, which may use TF32 tensor cores), like PyTorch's torch.backends.cudnn.allow_tf32
// but off by default, as tapegrad's GEMMs are. float16 and bfloat16 data compute in float32
// (mathPrec FLOAT, as PyTorch promotes half RNNs) with tensor-op math; float64 in double.
//
// Note [zero-length sequences]: the padded-IO layouts are given lengths of at least one, and rows
// whose true length is zero are fixed up afterwards (their output zeroed, their final state set to
// the initial state, their gradients routed straight through). That keeps our semantics whether
// or not cuDNN accepts zero lengths itself.
#include "backend/cudnn_lstm.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cudnn/cudnn_check.h"
#include "cudnn/cudnn_handle.h"
#include "kernels/launch.h"
#include "register.h"
#include "runtime/caching_allocator.h"
#include "runtime/cuda_check.h"
#include "tapegrad/cuda/blas_settings.h"

namespace tapegrad::cuda_backend {

namespace {

constexpr const char* kOp = "lstm (cudnn)";
constexpr int kGates = 4;  // i, f, g, o: cuDNN's linLayerID 0-3 (input) and 4-7 (recurrent) in this order

using backend::CudnnLstmBackwardArgs;
using backend::CudnnLstmContext;
using backend::CudnnLstmForwardArgs;
using backend::CudnnLstmShape;

// --- Descriptors (RAII; destroy failures are ignored, there is nothing to do about them) ---------

class TensorDescriptor {
 public:
  TensorDescriptor() { TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_), kOp); }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class DropoutDescriptor {
 public:
  DropoutDescriptor() { TG_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&desc_), kOp); }
  ~DropoutDescriptor() { cudnnDestroyDropoutDescriptor(desc_); }
  DropoutDescriptor(const DropoutDescriptor&) = delete;
  DropoutDescriptor& operator=(const DropoutDescriptor&) = delete;
  cudnnDropoutDescriptor_t get() const { return desc_; }

 private:
  cudnnDropoutDescriptor_t desc_ = nullptr;
};

class RnnDescriptor {
 public:
  RnnDescriptor() { TG_CUDNN_CHECK(cudnnCreateRNNDescriptor(&desc_), kOp); }
  ~RnnDescriptor() { cudnnDestroyRNNDescriptor(desc_); }
  RnnDescriptor(const RnnDescriptor&) = delete;
  RnnDescriptor& operator=(const RnnDescriptor&) = delete;
  cudnnRNNDescriptor_t get() const { return desc_; }

 private:
  cudnnRNNDescriptor_t desc_ = nullptr;
};

class RnnDataDescriptor {
 public:
  RnnDataDescriptor() { TG_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&desc_), kOp); }
  ~RnnDataDescriptor() { cudnnDestroyRNNDataDescriptor(desc_); }
  RnnDataDescriptor(const RnnDataDescriptor&) = delete;
  RnnDataDescriptor& operator=(const RnnDataDescriptor&) = delete;
  cudnnRNNDataDescriptor_t get() const { return desc_; }

 private:
  cudnnRNNDataDescriptor_t desc_ = nullptr;
};

// Makes the tensors' device current for the scope (handles, allocations and launches follow it).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    TG_CUDA_CHECK(cudaGetDevice(&previous_), kOp);
    if (previous_ != device) {
      TG_CUDA_CHECK(cudaSetDevice(device), kOp);
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

std::shared_ptr<Storage> device_buffer(size_t nbytes, int device) {
  return std::make_shared<Storage>(nbytes, Device(DeviceKind::CUDA, device), device_allocator());
}

int checked_int(int64_t value, const char* what) {
  TG_CHECK(value >= 0 && value <= INT_MAX, kOp, ": ", what, " ", value, " exceeds cuDNN's int32 range");
  return static_cast<int>(value);
}

cudnnDataType_t cudnn_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return CUDNN_DATA_FLOAT;
    case DType::Float64:
      return CUDNN_DATA_DOUBLE;
    case DType::Float16:
      return CUDNN_DATA_HALF;
    case DType::BFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      TG_CHECK(false, kOp, ": cuDNN's LSTM runs in float32, float64, float16 or bfloat16, got ", dtype);
  }
  return CUDNN_DATA_FLOAT;  // unreachable
}

// --- The sizes of one call ------------------------------------------------------------------------

struct Dims {
  int steps, batch, input_size, hidden, layers, directions;
  size_t elem;
  int states() const { return layers * directions; }  // the leading dim of hx, cx, hy, cy
  int output_size() const { return hidden * directions; }
};

Dims dims_of(const CudnnLstmForwardArgs& args) {
  const CudnnLstmShape& s = args.shape;
  const Tensor& x = args.x;
  Dims d;
  d.steps = checked_int(s.batch_first ? x.size(1) : x.size(0), "sequence length");
  d.batch = checked_int(s.batch_first ? x.size(0) : x.size(1), "batch size");
  d.input_size = checked_int(s.input_size, "input size");
  d.hidden = checked_int(s.hidden_size, "hidden size");
  d.layers = checked_int(s.num_layers, "number of layers");
  d.directions = s.bidirectional ? 2 : 1;
  checked_int(static_cast<int64_t>(d.layers) * d.directions, "number of layers times directions");
  checked_int(static_cast<int64_t>(d.hidden) * d.directions, "output size");
  checked_int(static_cast<int64_t>(d.batch) * d.hidden, "batch size times hidden size");
  d.elem = x.itemsize();
  TG_ASSERT(d.steps > 0 && d.batch > 0, "the op handles empty batches and sequences itself");
  return d;
}

// The lengths cuDNN runs with: at least one step each (Note [zero-length sequences]).
struct Lengths {
  std::vector<int32_t> actual;   // what the caller asked for
  std::vector<int32_t> cudnn;    // max(actual, 1)
  std::vector<int> empty_rows;   // b with actual[b] == 0
  std::vector<int> padded_rows;  // b with actual[b] < T
};

Lengths lengths_of(const CudnnLstmForwardArgs& args, const Dims& d) {
  const Tensor& l = args.lengths;
  TG_ASSERT(l.defined() && l.device().is_cpu() && l.dtype() == kInt32 && l.is_contiguous() && l.numel() == d.batch,
            "lengths must be a contiguous int32 [B] tensor on the cpu");
  const int32_t* p = l.data<int32_t>();
  Lengths out;
  out.actual.assign(p, p + d.batch);
  for (int b = 0; b < d.batch; ++b) {
    const int32_t v = out.actual[static_cast<size_t>(b)];
    TG_ASSERT(v >= 0 && v <= d.steps, "sequence length ", v, " outside [0, ", d.steps, "]");
    out.cudnn.push_back(std::max<int32_t>(v, 1));
    if (v == 0) out.empty_rows.push_back(b);
    if (v < d.steps) out.padded_rows.push_back(b);
  }
  return out;
}

// --- Descriptors for one call ------------------------------------------------------------------------

// This thread's dropout random state on `device`: created and seeded on first use, then restored
// (cudnnRestoreDropoutDescriptor does not reinitialise it), so successive calls draw fresh masks.
std::shared_ptr<Storage> thread_dropout_state(cudnnHandle_t handle, int device, cudnnDropoutDescriptor_t desc, float p,
                                              uint64_t seed) {
  thread_local std::unordered_map<int, std::shared_ptr<Storage>> states;
  auto it = states.find(device);
  if (it != states.end()) {
    TG_CUDNN_CHECK(cudnnRestoreDropoutDescriptor(desc, handle, p, it->second->data(), it->second->nbytes(), seed), kOp);
    return it->second;
  }
  size_t nbytes = 0;
  TG_CUDNN_CHECK(cudnnDropoutGetStatesSize(handle, &nbytes), kOp);
  std::shared_ptr<Storage> state = device_buffer(nbytes, device);
  TG_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc, handle, p, state->data(), nbytes, seed), kOp);
  states.emplace(device, state);
  return state;
}

struct Descriptors {
  DropoutDescriptor dropout;
  RnnDescriptor rnn;
  RnnDataDescriptor x, y;
  TensorDescriptor state;  // hx, cx, hy, cy and their gradients: [L*D, B, H]
};

// Dropout acts between layers only: one layer never needs the random state.
bool uses_dropout(const CudnnLstmShape& s) {
  return s.dropout > 0 && s.num_layers > 1;
}

// Sets every descriptor of a call. `dropout_state` is the state to restore (backward), or null to
// take this thread's (forward, which returns it through the same pointer).
void describe(cudnnHandle_t handle, const CudnnLstmForwardArgs& args, const Dims& d, const Lengths& lengths,
              std::shared_ptr<Storage>* dropout_state, Descriptors& desc) {
  const CudnnLstmShape& s = args.shape;
  const cudnnDataType_t dtype = cudnn_dtype(args.x.dtype());
  const int device = args.x.device().index();

  if (uses_dropout(s)) {
    const float p = static_cast<float>(s.dropout);
    if (*dropout_state) {
      Storage& state = **dropout_state;
      TG_CUDNN_CHECK(
          cudnnRestoreDropoutDescriptor(desc.dropout.get(), handle, p, state.data(), state.nbytes(), s.dropout_seed),
          kOp);
    } else {
      *dropout_state = thread_dropout_state(handle, device, desc.dropout.get(), p, s.dropout_seed);
    }
  } else {
    TG_CUDNN_CHECK(cudnnSetDropoutDescriptor(desc.dropout.get(), handle, 0.0f, nullptr, 0, 0), kOp);
  }

  // Note [math precision].
  const bool half = dtype == CUDNN_DATA_HALF || dtype == CUDNN_DATA_BFLOAT16;
  const cudnnDataType_t math_precision = half ? CUDNN_DATA_FLOAT : dtype;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (dtype == CUDNN_DATA_FLOAT && !cuda::allow_tf32()) math = CUDNN_FMA_MATH;
  if (half) math = CUDNN_TENSOR_OP_MATH;
  TG_CUDNN_CHECK(
      cudnnSetRNNDescriptor_v8(desc.rnn.get(), CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
                               s.has_bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS,
                               s.bidirectional ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, dtype,
                               math_precision, math, d.input_size, d.hidden,
                               /*projSize=*/d.hidden, d.layers, desc.dropout.get(), CUDNN_RNN_PADDED_IO_ENABLED),
      kOp);

  // Padded positions of y are written with this value (it must be host memory of the data type).
  float zero_f = 0.0f;
  double zero_d = 0.0;
  uint16_t zero_h = 0;  // +0.0 in float16 and in bfloat16
  void* fill = dtype == CUDNN_DATA_DOUBLE ? static_cast<void*>(&zero_d)
               : half                     ? static_cast<void*>(&zero_h)
                                          : static_cast<void*>(&zero_f);
  const cudnnRNNDataLayout_t layout =
      s.batch_first ? CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED : CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED;
  TG_CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc.x.get(), dtype, layout, d.steps, d.batch, d.input_size,
                                           lengths.cudnn.data(), fill),
                 kOp);
  TG_CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc.y.get(), dtype, layout, d.steps, d.batch, d.output_size(),
                                           lengths.cudnn.data(), fill),
                 kOp);

  const int state_dims[3] = {d.states(), d.batch, d.hidden};
  const int state_strides[3] = {d.batch * d.hidden, d.hidden, 1};
  TG_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc.state.get(), dtype, 3, state_dims, state_strides), kOp);
}

// --- Weight space layout ------------------------------------------------------------------------------

// Where one parameter's four gate blocks live in the weight space, as byte offsets.
struct ParamPlace {
  size_t gate_offset[kGates];
  size_t gate_bytes;
  bool gates_adjacent() const {
    for (int g = 1; g < kGates; ++g)
      if (gate_offset[g] != gate_offset[0] + g * gate_bytes) return false;
    return true;
  }
};

int64_t element_count(cudnnTensorDescriptor_t desc) {
  cudnnDataType_t dtype;
  int nb_dims = 0;
  int dim[8], stride[8];
  TG_CUDNN_CHECK(cudnnGetTensorNdDescriptor(desc, 8, &dtype, &nb_dims, dim, stride), kOp);
  int64_t n = 1;
  for (int i = 0; i < std::min(nb_dims, 8); ++i) n *= dim[i];
  return n;
}

// The places of every parameter, in the order of CudnnLstmForwardArgs::weights. `space` is any
// weight space of this descriptor (offsets are the same in the gradient space).
std::vector<ParamPlace> weight_layout(cudnnHandle_t handle, const Descriptors& desc, const Dims& d, bool has_bias,
                                      const Storage& space) {
  TensorDescriptor matrix_desc, bias_desc;
  const char* base = static_cast<const char*>(space.data());
  std::vector<ParamPlace> places;
  for (int k = 0; k < d.states(); ++k) {
    const int64_t in = k < d.directions ? d.input_size : d.output_size();
    ParamPlace w_ih{}, w_hh{}, b_ih{}, b_hh{};
    w_ih.gate_bytes = static_cast<size_t>(d.hidden) * in * d.elem;
    w_hh.gate_bytes = static_cast<size_t>(d.hidden) * d.hidden * d.elem;
    b_ih.gate_bytes = b_hh.gate_bytes = static_cast<size_t>(d.hidden) * d.elem;
    for (int id = 0; id < 2 * kGates; ++id) {
      void* matrix = nullptr;
      void* bias = nullptr;
      TG_CUDNN_CHECK(
          cudnnGetRNNWeightParams(handle, desc.rnn.get(), k, space.nbytes(), space.data(), id, matrix_desc.get(),
                                  &matrix, has_bias ? bias_desc.get() : nullptr, has_bias ? &bias : nullptr),
          kOp);
      const bool input_side = id < kGates;
      const int gate = id % kGates;
      ParamPlace& w = input_side ? w_ih : w_hh;
      TG_ASSERT(matrix != nullptr && element_count(matrix_desc.get()) * d.elem == w.gate_bytes,
                "cuDNN's weight matrix ", id, " of pseudo-layer ", k, " is not the expected [H, in] block");
      w.gate_offset[gate] = static_cast<size_t>(static_cast<const char*>(matrix) - base);
      if (has_bias) {
        ParamPlace& b = input_side ? b_ih : b_hh;
        TG_ASSERT(bias != nullptr && element_count(bias_desc.get()) * d.elem == b.gate_bytes, "cuDNN's bias ", id,
                  " of pseudo-layer ", k, " is not the expected [H] block");
        b.gate_offset[gate] = static_cast<size_t>(static_cast<const char*>(bias) - base);
      }
    }
    places.push_back(w_ih);
    places.push_back(w_hh);
    if (has_bias) {
      places.push_back(b_ih);
      places.push_back(b_hh);
    }
  }
  for (const ParamPlace& p : places)
    for (size_t offset : p.gate_offset)
      TG_ASSERT(offset + p.gate_bytes <= space.nbytes(), "weight block outside the space");
  return places;
}

// param (contiguous [4H, ...] or [4H], gate-major) <-> its blocks in a weight space.
void copy_param(const ParamPlace& place, const Tensor& param, char* space, bool into_space, cudaStream_t stream) {
  TG_ASSERT(param.is_contiguous() && param.numel() * param.itemsize() == kGates * place.gate_bytes,
            "parameter of shape ", shape_str(param.sizes()), " does not fill four gate blocks");
  char* dense = static_cast<char*>(param.data_ptr());
  auto copy = [&](size_t space_offset, size_t dense_offset, size_t bytes) {
    char* dst = into_space ? space + space_offset : dense + dense_offset;
    const char* src = into_space ? dense + dense_offset : space + space_offset;
    cuda::note_copy();
    TG_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), kOp);
  };
  if (place.gates_adjacent()) {
    copy(place.gate_offset[0], 0, kGates * place.gate_bytes);
  } else {
    for (int g = 0; g < kGates; ++g) copy(place.gate_offset[g], g * place.gate_bytes, place.gate_bytes);
  }
}

// --- Fix-ups for padding and empty sequences -----------------------------------------------------

// Zeroes steps t >= lengths[b] of each sequence b in `rows` of a [T, B, width] ([B, T, width]
// when batch_first) buffer: one (strided) memset per sequence.
void zero_padded_steps(void* data, bool batch_first, const Dims& d, int width, const std::vector<int32_t>& lengths,
                       const std::vector<int>& rows, cudaStream_t stream) {
  char* base = static_cast<char*>(data);
  const size_t row_bytes = static_cast<size_t>(width) * d.elem;
  for (int b : rows) {
    const int32_t len = lengths[static_cast<size_t>(b)];
    if (len >= d.steps) continue;
    const size_t pad_steps = static_cast<size_t>(d.steps - len);
    if (batch_first) {
      char* start = base + (static_cast<size_t>(b) * d.steps + len) * row_bytes;
      cuda::note_copy();
      TG_CUDA_CHECK(cudaMemsetAsync(start, 0, pad_steps * row_bytes, stream), kOp);
    } else {
      char* start = base + (static_cast<size_t>(len) * d.batch + b) * row_bytes;
      cuda::note_copy();
      TG_CUDA_CHECK(cudaMemset2DAsync(start, d.batch * row_bytes, 0, row_bytes, pad_steps, stream), kOp);
    }
  }
}

// For each row b in `rows` of [L*D, B, H] states: dst[:, b] = src[:, b], or zeros when src is null.
void copy_state_rows(void* dst, const void* src, const Dims& d, const std::vector<int>& rows, cudaStream_t stream) {
  const size_t row_bytes = static_cast<size_t>(d.hidden) * d.elem;
  const size_t pitch = static_cast<size_t>(d.batch) * row_bytes;
  for (int b : rows) {
    const size_t offset = static_cast<size_t>(b) * row_bytes;
    char* to = static_cast<char*>(dst) + offset;
    if (src == nullptr) {
      cuda::note_copy();
      TG_CUDA_CHECK(cudaMemset2DAsync(to, pitch, 0, row_bytes, d.states(), stream), kOp);
    } else {
      const char* from = static_cast<const char*>(src) + offset;
      cuda::note_copy();
      TG_CUDA_CHECK(cudaMemcpy2DAsync(to, pitch, from, pitch, row_bytes, d.states(), cudaMemcpyDeviceToDevice, stream),
                    kOp);
    }
  }
}

// A scratch copy of a contiguous device tensor.
std::shared_ptr<Storage> copy_of(const Tensor& t, int device, cudaStream_t stream) {
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.itemsize();
  std::shared_ptr<Storage> copy = device_buffer(nbytes, device);
  if (nbytes > 0) {
    cuda::note_copy();
    TG_CUDA_CHECK(cudaMemcpyAsync(copy->data(), t.data_ptr(), nbytes, cudaMemcpyDeviceToDevice, stream), kOp);
  }
  return copy;
}

const void* maybe_data(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}
void* maybe_mutable_data(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

// --- Forward ---------------------------------------------------------------------------------------

void lstm_forward(const CudnnLstmForwardArgs& args, CudnnLstmContext* context) {
  const int device = args.x.device().index();
  DeviceGuard guard(device);
  const Dims d = dims_of(args);
  const Lengths lengths = lengths_of(args, d);
  cudnnHandle_t handle = cudnn_handle(kOp);
  cudaStream_t stream = current_stream();

  Descriptors desc;
  std::shared_ptr<Storage> dropout_state;
  describe(handle, args, d, lengths, &dropout_state, desc);

  size_t weight_bytes = 0;
  TG_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(handle, desc.rnn.get(), &weight_bytes), kOp);
  std::shared_ptr<Storage> weight_space = args.packed_weights;
  if (weight_space) {
    TG_ASSERT(weight_space->nbytes() == weight_bytes && weight_space->device() == args.x.device(),
              "a cached weight space of ", weight_space->nbytes(), " bytes for a stack that needs ", weight_bytes);
  } else {
    weight_space = device_buffer(weight_bytes, device);
    const std::vector<ParamPlace> places = weight_layout(handle, desc, d, args.shape.has_bias, *weight_space);
    TG_ASSERT(places.size() == args.weights.size(), "expected ", places.size(), " weights, got ", args.weights.size());
    for (size_t i = 0; i < places.size(); ++i)
      copy_param(places[i], args.weights[i], static_cast<char*>(weight_space->data()), /*into_space=*/true, stream);
  }

  // cudnnRNNForward reads the lengths from device memory, possibly after it returns.
  std::shared_ptr<Storage> device_lengths = device_buffer(lengths.cudnn.size() * sizeof(int32_t), device);
  cuda::note_copy();
  TG_CUDA_CHECK(cudaMemcpyAsync(device_lengths->data(), lengths.cudnn.data(), lengths.cudnn.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream),
                kOp);

  const cudnnForwardMode_t mode = args.training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  size_t workspace_bytes = 0, reserve_bytes = 0;
  TG_CUDNN_CHECK(
      cudnnGetRNNTempSpaceSizes(handle, desc.rnn.get(), mode, desc.x.get(), &workspace_bytes, &reserve_bytes), kOp);
  std::shared_ptr<Storage> workspace = device_buffer(workspace_bytes, device);
  std::shared_ptr<Storage> reserve = args.training ? device_buffer(reserve_bytes, device) : nullptr;

  cuda::note_launch();  // one cuDNN call, however many kernels it launches
  TG_CUDNN_CHECK(cudnnRNNForward(handle, desc.rnn.get(), mode, static_cast<const int32_t*>(device_lengths->data()),
                                 desc.x.get(), args.x.data_ptr(), desc.y.get(), args.y.data_ptr(), desc.state.get(),
                                 maybe_data(args.hx), args.hy.data_ptr(), desc.state.get(), maybe_data(args.cx),
                                 args.cy.data_ptr(), weight_bytes, weight_space->data(), workspace_bytes,
                                 workspace->data(), reserve ? reserve_bytes : 0, reserve ? reserve->data() : nullptr),
                 kOp);

  // cuDNN fills the padded steps of y with zeros (paddingFill); the one step it ran for an empty
  // sequence is ours to clear.
  if (!lengths.empty_rows.empty()) {
    zero_padded_steps(args.y.data_ptr(), args.shape.batch_first, d, d.output_size(), lengths.actual, lengths.empty_rows,
                      stream);
    copy_state_rows(args.hy.data_ptr(), maybe_data(args.hx), d, lengths.empty_rows, stream);
    copy_state_rows(args.cy.data_ptr(), maybe_data(args.cx), d, lengths.empty_rows, stream);
  }

  context->weight_space = std::move(weight_space);
  context->reserve_space = std::move(reserve);
  context->dropout_state = std::move(dropout_state);
  context->device_lengths = std::move(device_lengths);
}

// --- Backward --------------------------------------------------------------------------------------

void lstm_backward(const CudnnLstmBackwardArgs& args) {
  const CudnnLstmForwardArgs& fwd = args.forward;
  const CudnnLstmContext& ctx = args.context;
  const int device = fwd.x.device().index();
  DeviceGuard guard(device);
  const Dims d = dims_of(fwd);
  const Lengths lengths = lengths_of(fwd, d);
  TG_ASSERT(ctx.weight_space && ctx.reserve_space && ctx.device_lengths,
            "backward needs a forward run in training mode");
  cudnnHandle_t handle = cudnn_handle(kOp);
  cudaStream_t stream = current_stream();

  Descriptors desc;
  std::shared_ptr<Storage> dropout_state = ctx.dropout_state;
  describe(handle, fwd, d, lengths, &dropout_state, desc);

  size_t workspace_bytes = 0, reserve_bytes = 0;
  TG_CUDNN_CHECK(cudnnGetRNNTempSpaceSizes(handle, desc.rnn.get(), CUDNN_FWD_MODE_TRAINING, desc.x.get(),
                                           &workspace_bytes, &reserve_bytes),
                 kOp);
  TG_ASSERT(reserve_bytes == ctx.reserve_space->nbytes(),
            "the reserve space changed size between forward and backward");
  std::shared_ptr<Storage> workspace = device_buffer(workspace_bytes, device);
  const auto* device_lengths = static_cast<const int32_t*>(ctx.device_lengths->data());

  // Rows cuDNN ran for one step although their length is zero must not feed it any gradient.
  const void* dy = args.dy.data_ptr();
  const void* dhy = args.dhy.data_ptr();
  const void* dcy = args.dcy.data_ptr();
  std::shared_ptr<Storage> dy_copy, dhy_copy, dcy_copy;
  if (!lengths.empty_rows.empty()) {
    dy_copy = copy_of(args.dy, device, stream);
    zero_padded_steps(dy_copy->data(), fwd.shape.batch_first, d, d.output_size(), lengths.actual, lengths.empty_rows,
                      stream);
    dhy_copy = copy_of(args.dhy, device, stream);
    copy_state_rows(dhy_copy->data(), nullptr, d, lengths.empty_rows, stream);
    dcy_copy = copy_of(args.dcy, device, stream);
    copy_state_rows(dcy_copy->data(), nullptr, d, lengths.empty_rows, stream);
    dy = dy_copy->data();
    dhy = dhy_copy->data();
    dcy = dcy_copy->data();
  }

  cuda::note_launch();
  TG_CUDNN_CHECK(
      cudnnRNNBackwardData_v8(handle, desc.rnn.get(), device_lengths, desc.y.get(), fwd.y.data_ptr(), dy, desc.x.get(),
                              args.dx.data_ptr(), desc.state.get(), maybe_data(fwd.hx), dhy,
                              maybe_mutable_data(args.dhx), desc.state.get(), maybe_data(fwd.cx), dcy,
                              maybe_mutable_data(args.dcx), ctx.weight_space->nbytes(), ctx.weight_space->data(),
                              workspace_bytes, workspace->data(), reserve_bytes, ctx.reserve_space->data()),
      kOp);

  // Whether cuDNN writes dx at padded steps is not documented; they get zero gradient here.
  zero_padded_steps(args.dx.data_ptr(), fwd.shape.batch_first, d, d.input_size, lengths.actual, lengths.padded_rows,
                    stream);
  if (!lengths.empty_rows.empty()) {
    // An empty sequence's final state is its initial state: the gradient passes straight through.
    if (args.dhx.defined()) copy_state_rows(args.dhx.data_ptr(), args.dhy.data_ptr(), d, lengths.empty_rows, stream);
    if (args.dcx.defined()) copy_state_rows(args.dcx.data_ptr(), args.dcy.data_ptr(), d, lengths.empty_rows, stream);
  }

  if (args.weight_grads.empty()) return;
  // cudnnRNNBackwardWeights_v8 adds into the gradient space (CUDNN_WGRAD_MODE_ADD), so start at zero.
  const size_t weight_bytes = ctx.weight_space->nbytes();
  std::shared_ptr<Storage> grad_space = device_buffer(weight_bytes, device);
  cuda::note_copy();
  TG_CUDA_CHECK(cudaMemsetAsync(grad_space->data(), 0, weight_bytes, stream), kOp);
  cuda::note_launch();
  TG_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(handle, desc.rnn.get(), CUDNN_WGRAD_MODE_ADD, device_lengths, desc.x.get(),
                                            fwd.x.data_ptr(), desc.state.get(), maybe_data(fwd.hx), desc.y.get(),
                                            fwd.y.data_ptr(), weight_bytes, grad_space->data(), workspace_bytes,
                                            workspace->data(), reserve_bytes, ctx.reserve_space->data()),
                 kOp);
  const std::vector<ParamPlace> places = weight_layout(handle, desc, d, fwd.shape.has_bias, *grad_space);
  TG_ASSERT(places.size() == args.weight_grads.size(), "expected ", places.size(), " weight gradients, got ",
            args.weight_grads.size());
  for (size_t i = 0; i < places.size(); ++i)
    copy_param(places[i], args.weight_grads[i], static_cast<char*>(grad_space->data()), /*into_space=*/false, stream);
}

}  // namespace

void register_cudnn(backend::KernelTable& table) {
  static const backend::CudnnLstmKernels kernels{lstm_forward, lstm_backward};
  table.cudnn_lstm = &kernels;
}

}  // namespace tapegrad::cuda_backend
