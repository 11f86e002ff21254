// Modules: registration and dotted names, initialisation, conversion, train/eval, state dicts,
// and a tiny MLP that learns.
#include <cmath>

#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::expect_close;
using testing::expect_error;

std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t hidden, int64_t out) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(in, hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, out)});
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
  EXPECT_NE(model->str().find("(0): Linear(in_features=4, out_features=8, bias=true)"), std::string::npos)
      << model->str();
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
  expect_error([&] { b->load_state_dict(missing); }, {"Missing key(s)", "2.bias"});
  StateDict extra = a->state_dict();
  extra.emplace_back("3.weight", zeros({1}));
  expect_error([&] { b->load_state_dict(extra); }, {"Unexpected key(s)", "3.weight"});
  b->load_state_dict(extra, false);  // non-strict ignores it
  StateDict wrong = a->state_dict();
  wrong[0].second = zeros({9, 9});
  expect_error([&] { b->load_state_dict(wrong); }, {"0.weight", "[9, 9]", "[4, 3]"});
}

// Regression: load_state_dict used to stop at the first problem. Like PyTorch it must list every
// missing key, every unexpected key and every shape mismatch in one error.
TEST(Module, LoadStateDictReportsEveryProblemAtOnce) {
  manual_seed(5);
  auto a = mlp(3, 4, 2);
  auto b = mlp(3, 4, 2);
  StateDict bad = a->state_dict();           // 0.weight, 0.bias, 2.weight, 2.bias
  bad[0].second = zeros({9, 9});             // shape mismatch
  bad[2].second = zeros({2});                // shape mismatch
  bad.pop_back();                            // missing 2.bias
  bad.erase(bad.begin() + 1);                // missing 0.bias
  bad.emplace_back("3.weight", zeros({1}));  // unexpected
  bad.emplace_back("extra", zeros({1}));     // unexpected
  std::vector<double> before = testing::values(b->parameters()[0]);
  try {
    b->load_state_dict(bad);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* part :
         {"Error(s) in loading state_dict for Sequential", "Missing key(s) in state_dict: \"0.bias\", \"2.bias\".",
          "Unexpected key(s) in state_dict: \"3.weight\", \"extra\".",
          "size mismatch for 0.weight: copying a param with shape [9, 9] from checkpoint, the shape in "
          "current model is [4, 3].",
          "size mismatch for 2.weight: copying a param with shape [2] from checkpoint, the shape in "
          "current model is [2, 4]."})
      EXPECT_NE(m.find(part), std::string::npos) << "'" << m << "' lacks '" << part << "'";
    // PyTorch's order: missing, then unexpected, then the mismatches.
    EXPECT_LT(m.find("Missing"), m.find("Unexpected"));
    EXPECT_LT(m.find("Unexpected"), m.find("size mismatch"));
  }
  // Nothing was copied, not even the entries that matched.
  expect_close(b->parameters()[0], before, 0);

  // Non-strict: keys are skipped and reported, shape mismatches still throw.
  StateDict partial = a->state_dict();
  partial.pop_back();
  partial.emplace_back("extra", zeros({1}));
  nn::LoadStateDictResult r = b->load_state_dict(partial, false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"2.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"extra"}));
  expect_close(b->parameters()[0], a->parameters()[0], 0);
  expect_error([&] { b->load_state_dict(bad, false); }, {"size mismatch for 0.weight", "size mismatch for 2.weight"});
  StateDict twice = a->state_dict();
  twice.push_back(twice[0]);
  expect_error([&] { b->load_state_dict(twice); }, {"Duplicate key(s)", "\"0.weight\""});
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
