// Broken checkpoints and values give clear errors: malformed optimiser state keys, step counts
// that are not whole numbers, Fashion-MNIST labels that are not class indices and pixels that are
// not finite. (The examples' own checks are in test_examples_cli.)
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "support/idx_writer.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

// Issue 16, item 6: "1x.exp_avg" was read as parameter 1 and "abc.exp_avg" gave a stoul message.
TEST(BadCheckpoints, MalformedOptimiserKeysAreErrors) {
  Tensor w = ones({2}).requires_grad_(), v = ones({2}).requires_grad_();
  optim::Adam adam({w, v});
  optim::SGD sgd({w, v}, optim::SGDOptions(0.1).momentum(0.9));
  for (const char* key : {"1x.exp_avg", "abc.exp_avg", "-1.exp_avg", ".exp_avg", "exp_avg", "1.", "+1.exp_avg"})
    expect_error([&] { adam.load_state_dict({{key, zeros({2})}}); }, {"Adam.load_state_dict", key});
  expect_error(
      [&] {
        adam.load_state_dict({{"99999999999999999999999.exp_avg", zeros({2})}});
      },
      {"Adam.load_state_dict", "beyond the 2"});
  expect_error([&] { adam.load_state_dict({{"2.exp_avg", zeros({2})}}); }, {"names parameter 2 of 2"});
  for (const char* key : {"1x.momentum_buffer", "abc.momentum_buffer", "0.momentum"})
    expect_error([&] { sgd.load_state_dict({{key, zeros({2})}}); }, {"SGD.load_state_dict", key});
  expect_error([&] { sgd.load_state_dict({{"0.momentum_buffer", zeros({3})}}); }, {"SGD.load_state_dict", "[3]"});
}

// A NaN step count was an undefined cast to int64.
TEST(BadCheckpoints, StepCountsMustBeWholePositiveNumbers) {
  Tensor w = ones({2}).requires_grad_();
  optim::Adam adam({w});
  for (double step : {std::nan(""), -2.0, 0.0, 2.5, 1e300, HUGE_VAL}) {
    expect_error(
        [&] {
          adam.load_state_dict(
              {{"0.step", full({}, step, kFloat64)}, {"0.exp_avg", zeros({2})}, {"0.exp_avg_sq", zeros({2})}});
        },
        {"Adam.load_state_dict", "'0.step'", "not a step count"});
  }
  expect_error([&] { adam.load_state_dict({{"0.step", ones({2})}}); }, {"'0.step'", "one step count"});
  // A good one still loads and the optimiser goes on from it.
  adam.load_state_dict({{"0.step", full({}, 3.0)}, {"0.exp_avg", zeros({2})}, {"0.exp_avg_sq", zeros({2})}});
  (w * 2.0).sum().backward();
  adam.step();
  EXPECT_EQ(adam.state_dict().front().second.item(), 4.0);
}

class BadFashionData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tapegrad_bad_fashion_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    testing::write_fashion_folder(dir_.string(), 20, 10);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const char* name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// Labels of 2.5 became 2 silently.
TEST_F(BadFashionData, FractionalLabelsAreErrors) {
  std::vector<float> labels(20, 1.0f);
  labels[7] = 2.5f;
  testing::write_idx_f32(file("train-labels-idx1-ubyte.gz"), {20}, labels);
  expect_error([&] { FashionMNIST(dir_.string(), true); }, {"FashionMNIST", "label 7", "2.5", "class index"});
  labels[7] = std::nanf("");
  testing::write_idx_f32(file("train-labels-idx1-ubyte.gz"), {20}, labels);
  expect_error([&] { FashionMNIST(dir_.string(), true); }, {"FashionMNIST", "label 7", "nan"});
  labels[7] = 3.0f;  // whole numbers in a float file are fine
  testing::write_idx_f32(file("train-labels-idx1-ubyte.gz"), {20}, labels);
  EXPECT_EQ(FashionMNIST(dir_.string(), true).labels().tolist<int64_t>()[7], 3);
}

TEST_F(BadFashionData, NonFinitePixelsAreErrors) {
  std::vector<float> pixels(20 * 784, 0.5f);
  pixels[100] = std::nanf("");
  testing::write_idx_f32(file("train-images-idx3-ubyte.gz"), {20, 28, 28}, pixels);
  expect_error([&] { FashionMNIST(dir_.string(), true); }, {"FashionMNIST", "NaN or infinite"});
}

}  // namespace
}  // namespace tapegrad
