// FashionMNIST: loads the idx.gz files into a TensorDataset of [N, 784] float images and int64 labels.
#include <cmath>
#include <string>
#include <vector>

#include "tapegrad/data/dataset.h"
#include "tapegrad/data/idx.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad {
namespace {

std::pair<Tensor, Tensor> load(const std::string& root, bool train, bool normalize) {
  std::string prefix = root + "/" + (train ? "train" : "t10k");
  std::string image_path = prefix + "-images-idx3-ubyte.gz", label_path = prefix + "-labels-idx1-ubyte.gz";
  Tensor images = read_idx(image_path);
  Tensor labels = read_idx(label_path);
  TG_CHECK(images.dim() == 3, "FashionMNIST: '", image_path, "' should be [N, rows, cols], got ", images.dim(), " dims");
  TG_CHECK(labels.dim() == 1, "FashionMNIST: '", label_path, "' should be [N], got ", labels.dim(), " dims");
  TG_CHECK(images.size(0) == labels.size(0), "FashionMNIST: '", image_path, "' has ", images.size(0),
           " images but '", label_path, "' has ", labels.size(0), " labels");
  // Read as doubles on the host: a label of 2.5 or NaN (an IDX file may hold floats) must not
  // become 2 or an undefined conversion on its way to int64.
  const std::vector<double> label_values = labels.tolist<double>();
  for (size_t i = 0; i < label_values.size(); ++i) {
    const double v = label_values[i];
    TG_CHECK(v >= 0 && v <= 9 && v == std::floor(v), "FashionMNIST: label ", i, " in '", label_path, "' is ", v,
             ", not a class index 0..9");
  }
  if (images.is_floating_point() && images.numel() > 0) {
    TG_CHECK(std::isfinite(sum(images.to(kFloat64)).item()), "FashionMNIST: '", image_path,
             "' holds NaN or infinite pixels (or values too large to sum)");
  }
  Tensor x = images.reshape({images.size(0), images.size(1) * images.size(2)}).to(kFloat32) / 255.0;
  if (normalize) x = (x - 0.2860) / 0.3530;
  return {x, labels.to(kInt64)};
}

}  // namespace

FashionMNIST::FashionMNIST(std::string root, bool train, bool normalize)
    : FashionMNIST(load(root, train, normalize)) {}

FashionMNIST::FashionMNIST(std::pair<Tensor, Tensor> data)
    : TensorDataset(std::move(data.first), std::move(data.second)) {}

}  // namespace tapegrad
