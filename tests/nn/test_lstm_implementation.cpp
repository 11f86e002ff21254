// Selecting the LSTM implementation (LSTMOptions::implementation): what must hold on any machine.
// The numerical parity of the cuDNN implementation is tested on a GPU in test_cuda_cudnn_lstm.
#include "support/test_util.h"

namespace tapegrad {
namespace {

using nn::LstmImplementation;
using testing::expect_error;

nn::LSTMOptions cudnn_options() {
  return nn::LSTMOptions().implementation(LstmImplementation::CuDNN);
}

TEST(LstmImplementation, DefaultIsFused) {
  EXPECT_EQ(nn::LSTMOptions().implementation_, LstmImplementation::Fused);
  nn::LSTM lstm(3, 4);
  EXPECT_EQ(lstm.implementation(), LstmImplementation::Fused);
  EXPECT_EQ(nn::LSTM(3, 4, cudnn_options()).implementation(), LstmImplementation::CuDNN);
}

TEST(LstmImplementation, CudnnOnCpuTensorsIsAClearError) {
  nn::LSTM lstm(3, 4, cudnn_options().num_layers(2).bidirectional(true));
  Tensor x = randn({5, 2, 3});
  expect_error([&] { lstm.forward(x); },
               {"lstm (cudnn)", "needs CUDA tensors", "use the default implementation on the CPU"});
  // The same with every optional input given.
  Tensor h0 = zeros({4, 2, 4}), c0 = zeros({4, 2, 4});
  expect_error([&] { lstm.forward(x, h0, c0, tensor<int64_t>({5, 3}, {2})); }, {"needs CUDA tensors"});
}

TEST(LstmImplementation, CudnnOpOnCpuTensorsIsAClearError) {
  Tensor x = randn({2, 1, 3});
  std::vector<Tensor> weights{randn({8, 3}), randn({8, 2})};
  expect_error([&] { lstm_cudnn(x, Tensor(), Tensor(), weights, CudnnLstmOptions()); },
               {"lstm (cudnn)", "needs CUDA tensors", "use the default implementation on the CPU", "cpu"});
}

TEST(LstmImplementation, ModuleChecksStillComeFirst) {
  nn::LSTM lstm(3, 4, cudnn_options());
  expect_error([&] { lstm.forward(randn({5, 2, 7})); }, {"LSTM", "7 features", "expected 3"});
  expect_error([&] { lstm.forward(randn({5, 2, 3}), zeros({2, 2, 4})); }, {"LSTM: initial state", "[1, 2, 4]"});
}

TEST(LstmImplementation, StateDictIsTheSameUnderBothImplementations) {
  for (bool bias : {true, false}) {
    for (bool bidirectional : {false, true}) {
      nn::LSTMOptions options = nn::LSTMOptions().num_layers(3).bias(bias).bidirectional(bidirectional);
      Generator g1(7), g2(7);
      nn::LSTM fused(5, 6, options, &g1);
      nn::LSTM cudnn(5, 6, nn::LSTMOptions(options).implementation(LstmImplementation::CuDNN), &g2);
      StateDict a = fused.state_dict(), b = cudnn.state_dict();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_EQ(a[i].second.sizes(), b[i].second.sizes()) << a[i].first;
        // The same generator gives the same initial values: the implementation changes nothing there.
        EXPECT_EQ(a[i].second.tolist<float>(), b[i].second.tolist<float>()) << a[i].first;
      }
      // And one loads into the other.
      cudnn.load_state_dict(a);
    }
  }
}

TEST(LstmImplementation, ReprNamesTheCudnnImplementation) {
  EXPECT_EQ(nn::LSTM(3, 4).str().find("cudnn"), std::string::npos);
  EXPECT_NE(nn::LSTM(3, 4, cudnn_options()).str().find("implementation=cudnn"), std::string::npos);
}

}  // namespace
}  // namespace tapegrad
