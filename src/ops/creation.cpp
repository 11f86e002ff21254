// Tensor factories.
#include "tapegrad/ops/creation.h"

#include <cmath>
#include <cstring>

#include "math/unfused.h"
#include "ops/op_helpers.h"

namespace tapegrad {

using ops::empty_tensor;

namespace {
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad()) t.requires_grad_(true);
  return t;
}

Tensor filled(const char* op, const Shape& sizes, double value, const TensorOptions& options) {
  ops::check_value_fits(op, value, options.dtype());
  Tensor t = empty_tensor(sizes, options.dtype(), options.device(), op);
  if (t.numel() > 0) TG_KERNEL(t.device(), fill)(t, value);
  return finish(t, options);
}
}  // namespace

Tensor empty(const Shape& sizes, const TensorOptions& options) {
  return finish(empty_tensor(sizes, options.dtype(), options.device(), "empty"), options);
}

Tensor full(const Shape& sizes, double value, const TensorOptions& options) {
  return filled("full", sizes, value, options);
}
Tensor zeros(const Shape& sizes, const TensorOptions& options) {
  return filled("zeros", sizes, 0.0, options);
}
Tensor ones(const Shape& sizes, const TensorOptions& options) {
  return filled("ones", sizes, 1.0, options);
}

namespace {
TensorOptions like(const Tensor& other) {
  return TensorOptions(other.dtype()).device(other.device());
}
}  // namespace

Tensor empty_like(const Tensor& other) {
  return empty(other.sizes(), like(other));
}
Tensor zeros_like(const Tensor& other) {
  return zeros(other.sizes(), like(other));
}
Tensor ones_like(const Tensor& other) {
  return ones(other.sizes(), like(other));
}
Tensor full_like(const Tensor& other, double value) {
  return full(other.sizes(), value, like(other));
}

Tensor arange(double end, const TensorOptions& options) {
  return arange(0.0, end, 1.0, options);
}

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  TG_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
           "arange: expected finite start/end and a non-zero step, got ", start, ", ", end, ", ", step);
  const double length = std::ceil((end - start) / step);
  TG_CHECK(length >= 0, "arange: step ", step, " never reaches ", end, " from ", start);
  // 2^63 as a double: a count at or above it cannot be an int64 (and the cast would be undefined).
  TG_CHECK(length < 9223372036854775808.0, "arange: [", start, ", ", end, ") in steps of ", step, " has ", length,
           " elements, more than int64 can count");
  const auto count = static_cast<int64_t>(length);
  if (count > 0) {
    ops::check_value_fits("arange", start, options.dtype());
    ops::check_value_fits("arange", math::arange_value(start, step, count - 1), options.dtype());
  }
  Tensor t = empty_tensor({count}, options.dtype(), options.device(), "arange");
  if (count > 0) TG_KERNEL(t.device(), arange)(t, start, step);
  return finish(t, options);
}

Tensor linspace(double start, double end, int64_t steps, const TensorOptions& options) {
  TG_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  TG_CHECK(std::isfinite(start) && std::isfinite(end), "linspace: expected finite start and end, got ", start, ", ",
           end);
  ops::check_value_fits("linspace", start, options.dtype());
  ops::check_value_fits("linspace", end, options.dtype());
  Tensor t = empty_tensor({steps}, options.dtype(), options.device(), "linspace");
  if (steps > 0)
    TG_KERNEL(t.device(), arange)(t, start, steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0);
  if (steps > 1) TG_KERNEL(t.device(), fill)(t.narrow(0, steps - 1, 1), end);  // the end point exactly
  return finish(t, options);
}

Tensor& uniform_(Tensor& out, double low, double high, Generator* generator) {
  TG_CHECK(low <= high, "uniform_: low ", low, " > high ", high);
  TG_CHECK(out.is_contiguous(), "uniform_: expected a contiguous tensor");
  ops::check_floating("uniform_", out);
  ops::check_inference_inplace("uniform_", out);
  Generator::Draw draw = (generator ? *generator : default_generator()).reserve(static_cast<uint64_t>(out.numel()));
  if (out.numel() > 0) TG_KERNEL(out.device(), uniform)(out, low, high, draw.seed, draw.offset);
  out.storage()->bump_version();
  return out;
}

Tensor& normal_(Tensor& out, double mean, double std, Generator* generator) {
  TG_CHECK(std >= 0, "normal_: std must be >= 0, got ", std);
  TG_CHECK(out.is_contiguous(), "normal_: expected a contiguous tensor");
  ops::check_floating("normal_", out);
  ops::check_inference_inplace("normal_", out);
  Generator::Draw draw = (generator ? *generator : default_generator()).reserve(static_cast<uint64_t>(out.numel()));
  if (out.numel() > 0) TG_KERNEL(out.device(), normal)(out, mean, std, draw.seed, draw.offset);
  out.storage()->bump_version();
  return out;
}

Tensor rand(const Shape& sizes, const TensorOptions& options, Generator* generator) {
  Tensor t = empty_tensor(sizes, options.dtype(), options.device(), "rand");
  uniform_(t, 0.0, 1.0, generator);
  return finish(t, options);
}

Tensor randn(const Shape& sizes, const TensorOptions& options, Generator* generator) {
  Tensor t = empty_tensor(sizes, options.dtype(), options.device(), "randn");
  normal_(t, 0.0, 1.0, generator);
  return finish(t, options);
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, const TensorOptions& options, Generator* generator) {
  TG_CHECK(low < high, "randint: expected low < high, got [", low, ", ", high, ")");
  TG_CHECK(options.dtype() == kInt32 || options.dtype() == kInt64 || options.dtype() == kFloat32 ||
               options.dtype() == kFloat64,
           "randint: unsupported dtype ", options.dtype());
  int64_t span = 0;
  TG_CHECK(!__builtin_sub_overflow(high, low, &span), "randint: the range [", low, ", ", high,
           ") has more values than int64 can count");
  ops::check_value_fits("randint", static_cast<double>(low), options.dtype());
  ops::check_value_fits("randint", static_cast<double>(high - 1), options.dtype());
  Tensor t = empty_tensor(sizes, options.dtype(), options.device(), "randint");
  Generator::Draw draw = (generator ? *generator : default_generator()).reserve(static_cast<uint64_t>(t.numel()));
  if (t.numel() > 0) TG_KERNEL(t.device(), randint)(t, low, high, draw.seed, draw.offset);
  return finish(t, options);
}

Tensor rand_like(const Tensor& other, Generator* generator) {
  return rand(other.sizes(), like(other), generator);
}
Tensor randn_like(const Tensor& other, Generator* generator) {
  return randn(other.sizes(), like(other), generator);
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& sizes, TensorOptions options) {
  Shape shape = sizes.empty() ? Shape{static_cast<int64_t>(values.size())} : sizes;
  TG_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor host = empty_tensor(shape, dtype_of<T>::value, kCPU, "tensor");
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  Tensor out = host;
  if (options.dtype() != host.dtype() || options.device() != host.device())
    out = host.to(options.device(), options.dtype());
  return finish(out, options);
}

template Tensor tensor<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor tensor<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);

Tensor scalar_tensor(double value, const TensorOptions& options) {
  return full({}, value, options);
}

Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device, std::function<void(void*)> deleter) {
  const size_t nbytes = checked_nbytes("from_blob", sizes, dtype_size(dtype));
  TG_CHECK(data != nullptr || nbytes == 0, "from_blob: null data pointer for shape ", shape_str(sizes));
  auto storage = std::make_shared<Storage>(data, nbytes, device, std::move(deleter));
  return Tensor(std::move(storage), 0, sizes, contiguous_strides(sizes), dtype);
}

}  // namespace tapegrad
