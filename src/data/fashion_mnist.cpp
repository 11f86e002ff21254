// FashionMNIST: loads the idx.gz files into a TensorDataset of [N, 784] float images and int64 labels.
#include <string>

#include "tapegrad/data/dataset.h"
#include "tapegrad/data/idx.h"

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
  if (labels.numel() > 0) {
    int64_t lo = labels.min().item<int64_t>(), hi = labels.max().item<int64_t>();
    TG_CHECK(lo >= 0 && hi <= 9, "FashionMNIST: labels in '", label_path, "' must be 0..9, found ", lo, "..", hi);
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
