// FashionMNIST: loads the idx.gz files into a TensorDataset of [N, 784] float images and int64 labels.
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "tapegrad/data/dataset.h"
#include "tapegrad/data/idx.h"

namespace tapegrad {
namespace {

// Pixels are bytes: the loader divides by 255, so a value outside 0..255 (an IDX file of int32
// or float values holding something else) would train on garbage without any error. read_idx
// returns a contiguous int32, float32 or float64 tensor; the loop reads it in place (60000 x 784
// values: no copy to doubles).
template <class T>
void check_range(const T* values, int64_t n, const std::string& path) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = values[i];
    // Written so that NaN fails too.
    TG_CHECK(v >= T(0) && v <= T(255), "FashionMNIST: '", path, "' holds pixel ", i, " = ", v, ", outside 0..255",
             std::is_floating_point<T>::value && !std::isfinite(double(v)) ? " (NaN or infinite)" : "");
  }
}

void check_pixels(const Tensor& images, const std::string& path) {
  if (images.dtype() == kInt32)
    check_range(images.data<int32_t>(), images.numel(), path);
  else if (images.dtype() == kFloat32)
    check_range(images.data<float>(), images.numel(), path);
  else
    check_range(images.data<double>(), images.numel(), path);
}

std::pair<Tensor, Tensor> load(const std::string& root, bool train, bool normalize) {
  std::string prefix = root + "/" + (train ? "train" : "t10k");
  std::string image_path = prefix + "-images-idx3-ubyte.gz", label_path = prefix + "-labels-idx1-ubyte.gz";
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  TG_CHECK(images.dim() == 3, "FashionMNIST: '", image_path, "' should be [N, rows, cols], got ", images.dim(),
           " dims");
  TG_CHECK(labels.dim() == 1, "FashionMNIST: '", label_path, "' should be [N], got ", labels.dim(), " dims");
  TG_CHECK(images.size(0) == labels.size(0), "FashionMNIST: '", image_path, "' has ", images.size(0), " images but '",
           label_path, "' has ", labels.size(0), " labels");
  // Read as doubles on the host: a label of 2.5 or NaN (an IDX file may hold floats) must not
  // become 2 or an undefined conversion on its way to int64.
  const std::vector<double> label_values = labels.tolist<double>();
  for (size_t i = 0; i < label_values.size(); ++i) {
    const double v = label_values[i];
    TG_CHECK(v >= 0 && v <= 9 && v == std::floor(v), "FashionMNIST: label ", i, " in '", label_path, "' is ", v,
             ", not a class index 0..9");
  }
  check_pixels(images, image_path);
  Tensor x = images.reshape({images.size(0), images.size(1) * images.size(2)}).to(kFloat32) / 255.0;
  if (normalize) x = (x - 0.2860) / 0.3530;
  return {x, labels.to(kInt64)};
}

}  // namespace

FashionMNIST::FashionMNIST(std::string root, bool train, bool normalize) : FashionMNIST(load(root, train, normalize)) {}

FashionMNIST::FashionMNIST(std::pair<Tensor, Tensor> data)
    : TensorDataset(std::move(data.first), std::move(data.second)) {}

}  // namespace tapegrad
