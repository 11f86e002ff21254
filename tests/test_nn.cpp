// Modules: registration and dotted names, initialisation, conversion, train/eval, state dicts,
// and a tiny MLP that learns.
#include <cmath>

#include "test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;

std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t hidden, int64_t out) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(hidden, out)});
}

std::vector<std::string> names(const StateDict& dict) {
  std::vector<std::string> out;
  for (const auto& [n, t] : dict) out.push_back(n);
  return out;
}

TEST(Module, SequentialNamesLikePyTorch) {
  auto model = mlp(4, 8, 3);
  EXPECT_EQ(names(model->named_parameters()), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(model->parameters().size(), 4u);
  EXPECT_EQ(model->size(), 3u);
  EXPECT_EQ((*model)[0]->name(), "Linear");
  expect_error([&] { (*model)[3]; }, {"Sequential", "index 3"});
  EXPECT_NE(model->str().find("(0): Linear(in_features=4, out_features=8, bias=true)"), std::string::npos) << model->str();
}

TEST(Linear, DefaultInitialisationBounds) {
  nn::Linear layer(100, 50);
  EXPECT_EQ(layer.weight.sizes(), (Shape{50, 100}));
  EXPECT_EQ(layer.bias.sizes(), (Shape{50}));
  EXPECT_TRUE(layer.weight.requires_grad() && layer.weight.is_leaf());
  double bound = 1.0 / std::sqrt(100.0);
  for (double v : testing::values(layer.weight)) EXPECT_LE(std::fabs(v), bound);
  for (double v : testing::values(layer.bias)) EXPECT_LE(std::fabs(v), bound);
  double spread = max(abs(layer.weight)).item();
  EXPECT_GT(spread, 0.9 * bound);  // uses the whole range
  nn::Linear no_bias(3, 2, false);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  expect_error([] { nn::Linear(0, 2); }, {"Linear"});
}

TEST(Linear, ForwardIsXWtPlusB) {
  nn::Linear layer(2, 2);
  {
    NoGradGuard no_grad;
    layer.weight.copy_(tensor<float>({1, 2, 3, 4}, {2, 2}));
    layer.bias.copy_(tensor<float>({0.5, -0.5}));
  }
  expect_close(layer(tensor<float>({1, 1}, {1, 2})), {3.5, 6.5});
}

TEST(Module, ToDtypeConvertsInPlaceSoHandlesFollow) {
  auto model = mlp(3, 4, 2);
  Tensor w = model->parameters()[0];
  model->to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);
  EXPECT_TRUE(w.requires_grad() && w.is_leaf());
  Tensor out = model->forward(ones({5, 3}, kFloat64));
  EXPECT_EQ(out.dtype(), kFloat64);
  expect_error([&] { model->to(kInt64); }, {"floating point"});
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  manual_seed(3);
  auto a = mlp(3, 4, 2);
  manual_seed(4);
  auto b = mlp(3, 4, 2);
  Tensor x = randn({2, 3});
  EXPECT_GT(max(abs(sub(a->forward(x), b->forward(x)))).item(), 1e-6);
  b->load_state_dict(a->state_dict());
  expect_close(b->forward(x), a->forward(x), 0);

  StateDict missing = a->state_dict();
  missing.pop_back();
  expect_error([&] { b->load_state_dict(missing); }, {"missing key", "2.bias"});
  StateDict extra = a->state_dict();
  extra.emplace_back("3.weight", zeros({1}));
  expect_error([&] { b->load_state_dict(extra); }, {"unexpected key", "3.weight"});
  b->load_state_dict(extra, false);  // non-strict ignores it
  StateDict wrong = a->state_dict();
  wrong[0].second = zeros({9, 9});
  expect_error([&] { b->load_state_dict(wrong); }, {"0.weight", "[9, 9]", "[4, 3]"});
}

TEST(Dropout, TrainAndEval) {
  nn::Dropout drop(0.5);
  Tensor x = ones({10000});
  Tensor y = drop(x);
  double kept = gt(y, 0.0).to(kFloat32).mean().item();
  EXPECT_NEAR(kept, 0.5, 0.03);
  EXPECT_NEAR(y.mean().item(), 1.0, 0.05);  // scaled by 1/(1-p)
  for (double v : testing::values(y)) EXPECT_TRUE(v == 0.0 || v == 2.0);
  drop.eval();
  expect_close(drop(x), testing::values(x), 0);
  expect_error([] { nn::Dropout(1.5); }, {"Dropout", "1.5"});
}

TEST(Module, TrainEvalRecurses) {
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(2, 2), std::make_shared<nn::Dropout>(0.2)});
  model->eval();
  EXPECT_FALSE((*model)[1]->is_training());
  model->train();
  EXPECT_TRUE((*model)[1]->is_training());
}

TEST(Training, TinyMlpLearnsWithAdam) {
  manual_seed(7);
  Tensor x = randn({256, 6});
  Tensor y = argmax(x.narrow(1, 0, 3), 1);  // class = largest of the first three features
  auto model = mlp(6, 32, 3);
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  nn::CrossEntropyLoss loss_fn;
  double loss = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor l = loss_fn(model->forward(x), y);
    loss = l.item();
    opt.zero_grad();
    l.backward();
    opt.step();
  }
  EXPECT_LT(loss, 0.1);
  double accuracy = eq(argmax(model->forward(x), 1), y).to(kFloat32).mean().item();
  EXPECT_GT(accuracy, 0.97);
}

TEST(Training, SgdMomentumFitsRegression) {
  manual_seed(8);
  Tensor x = randn({128, 3});
  Tensor y = add(matmul(x, tensor<float>({1.5f, -2.0f, 0.5f}, {3, 1})), 0.25);
  nn::Linear layer(3, 1);
  optim::SGD opt(layer.parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::MSELoss mse;
  double loss = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor l = mse(layer(x), y);
    loss = l.item();
    opt.zero_grad();
    l.backward();
    opt.step();
  }
  EXPECT_LT(loss, 1e-6);
  expect_close(layer.bias, {0.25}, 1e-3);
}

}  // namespace
}  // namespace tapegrad

namespace tapegrad {
namespace {

TEST(Checkpoint, ModuleStateDictThroughSafetensors) {
  manual_seed(9);
  nn::LSTM a(3, 4, nn::LSTMOptions().num_layers(2));
  manual_seed(10);
  nn::LSTM b(3, 4, nn::LSTMOptions().num_layers(2));
  std::string path = ::testing::TempDir() + "tapegrad_lstm_checkpoint.safetensors";
  save_safetensors(path, a.state_dict());
  b.load_state_dict(load_safetensors(path));
  Tensor x = randn({5, 2, 3});
  testing::expect_close(b.forward(x).output, a.forward(x).output, 0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tapegrad
