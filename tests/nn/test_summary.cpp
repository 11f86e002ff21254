// nn::summary: output shapes, parameter counts and memory against hand-computed numbers for the
// models of mlp_seed and lstm_fashion.
#include <gtest/gtest.h>

#include "support/test_util.h"
#include "tapegrad/nn/summary.h"

using namespace tapegrad;
using tapegrad::testing::expect_error;

namespace {

// lstm_fashion's model: rows of the image through LSTM(28, H), the last hidden state through Linear(H, 10).
class RowLstm : public nn::UnaryModule {
 public:
  explicit RowLstm(int64_t hidden) {
    lstm_ = register_module("lstm", std::make_shared<nn::LSTM>(28, hidden, nn::LSTMOptions().batch_first(true)));
    fc_ = register_module("fc", std::make_shared<nn::Linear>(hidden, 10));
  }
  Tensor forward(const Tensor& images) override {
    return (*fc_)((*lstm_)(images.view({images.size(0), 28, 28})).h_n.select(0, 0));
  }
  std::string name() const override { return "RowLstm"; }

 private:
  std::shared_ptr<nn::LSTM> lstm_;
  std::shared_ptr<nn::Linear> fc_;
};

bool contains(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

}  // namespace

TEST(Summary, MlpSeed) {
  nn::Sequential model(nn::Linear(1000, 512), nn::ReLU(), nn::Linear(512, 10));
  nn::SummaryOptions options;
  options.optimizer_state_bytes_per_element = 8;  // Adam, f32
  const int64_t B = 64;
  nn::ModelSummary s = nn::summary(model, randn({B, 1000}), options);

  ASSERT_EQ(s.layers.size(), 4u);
  EXPECT_EQ(s.layers[0].type, "Sequential");
  EXPECT_EQ(s.layers[0].depth, 0);
  EXPECT_EQ(s.layers[1].name, "0");
  EXPECT_EQ(s.layers[1].depth, 1);
  EXPECT_EQ(s.layers[0].output_shapes, (std::vector<Shape>{{B, 10}}));
  EXPECT_EQ(s.layers[1].output_shapes, (std::vector<Shape>{{B, 512}}));
  EXPECT_EQ(s.layers[2].output_shapes, (std::vector<Shape>{{B, 512}}));
  EXPECT_EQ(s.layers[3].output_shapes, (std::vector<Shape>{{B, 10}}));
  const int64_t fc1 = 1000 * 512 + 512, fc2 = 512 * 10 + 10;  // 512,512 and 5,130
  EXPECT_EQ(s.layers[0].num_params, 0);
  EXPECT_EQ(s.layers[1].num_params, fc1);
  EXPECT_EQ(s.layers[2].num_params, 0);
  EXPECT_EQ(s.layers[3].num_params, fc2);
  EXPECT_EQ(s.total_params, 517642);
  EXPECT_EQ(s.trainable_params, 517642);
  EXPECT_EQ(s.non_trainable_params, 0);
  EXPECT_EQ(s.input_bytes, B * 1000 * 4);
  EXPECT_EQ(s.param_bytes, 517642 * 4);
  EXPECT_EQ(s.gradient_bytes, 517642 * 4);
  EXPECT_EQ(s.optimizer_state_bytes, 517642 * 8);
  const int64_t activations = (B * 512 + B * 512 + B * 10) * 4;  // leaves: Linear, ReLU, Linear
  EXPECT_EQ(s.activation_bytes, activations);
  EXPECT_EQ(s.torchinfo_pass_bytes, 2 * (B * 512 + B * 10) * 4);  // only leaves with parameters, doubled
  EXPECT_EQ(s.total_bytes, s.input_bytes + 517642 * 16 + activations);

  EXPECT_TRUE(contains(s.table, "  Linear (0)")) << s.table;
  EXPECT_TRUE(contains(s.table, "[64, 512]")) << s.table;
  EXPECT_TRUE(contains(s.table, "512,512")) << s.table;
  EXPECT_TRUE(contains(s.table, "5,130")) << s.table;
  EXPECT_TRUE(contains(s.table, "Total params: 517,642")) << s.table;
  EXPECT_TRUE(contains(s.table, "Params size (MB): 2.07")) << s.table;
  EXPECT_TRUE(contains(s.table, "Optimizer state size (MB): 4.14")) << s.table;
  // The pass ran without recording: no gradients, no tape.
  for (const Tensor& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
  // The hooks are gone afterwards.
  for (const auto& entry : model.named_modules()) EXPECT_FALSE(entry.second->has_forward_hooks());
}

TEST(Summary, RowLstm) {
  const int64_t H = 128, B = 8;
  RowLstm model(H);
  nn::ModelSummary s = nn::summary(model, randn({B, 784}));
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_EQ(s.layers[1].type, "LSTM");
  EXPECT_EQ(s.layers[1].name, "lstm");
  EXPECT_EQ(s.layers[2].name, "fc");
  // weight_ih [4H, 28], weight_hh [4H, H], bias_ih and bias_hh [4H]
  const int64_t lstm = 4 * H * 28 + 4 * H * H + 2 * 4 * H;  // 80,896
  const int64_t fc = H * 10 + 10;                           // 1,290
  EXPECT_EQ(lstm, 80896);
  EXPECT_EQ(s.layers[1].num_params, lstm);
  EXPECT_EQ(s.layers[2].num_params, fc);
  EXPECT_EQ(s.total_params, lstm + fc);
  EXPECT_EQ(s.layers[0].output_shapes, (std::vector<Shape>{{B, 10}}));
  EXPECT_EQ(s.layers[1].output_shapes, (std::vector<Shape>{{B, 28, H}, {1, B, H}, {1, B, H}}));
  EXPECT_EQ(s.layers[2].output_shapes, (std::vector<Shape>{{B, 10}}));
  EXPECT_EQ(s.activation_bytes, (B * 28 * H + 2 * B * H + B * 10) * 4);
  EXPECT_EQ(s.optimizer_state_bytes, 0);
  EXPECT_TRUE(contains(s.table, "  LSTM (lstm)")) << s.table;
  EXPECT_TRUE(contains(s.table, "[8, 28, 128], [1, 8, 128], [1, 8, 128]")) << s.table;
  EXPECT_TRUE(contains(s.table, "80,896")) << s.table;
  EXPECT_TRUE(contains(s.table, "Total params: 82,186")) << s.table;
}

TEST(Summary, NonTrainableParametersCountSeparately) {
  nn::Sequential model(nn::Linear(6, 4), nn::Linear(4, 3));
  model[0]->named_parameters()[0].second.requires_grad_(false);  // freeze the first weight (24 elements)
  nn::SummaryOptions options;
  options.optimizer_state_bytes_per_element = 4;
  nn::ModelSummary s = nn::summary(model, randn({2, 6}), options);
  EXPECT_EQ(s.total_params, 24 + 4 + 12 + 3);
  EXPECT_EQ(s.trainable_params, 4 + 12 + 3);
  EXPECT_EQ(s.non_trainable_params, 24);
  EXPECT_EQ(s.layers[1].trainable_params, 4);
  EXPECT_EQ(s.gradient_bytes, (4 + 12 + 3) * 4);
  EXPECT_EQ(s.optimizer_state_bytes, (4 + 12 + 3) * 4);
  EXPECT_TRUE(contains(s.table, "Partial")) << s.table;
  EXPECT_TRUE(contains(s.table, "Non-trainable params: 24")) << s.table;
  model[1]->named_parameters()[0].second.requires_grad_(false);
  model[1]->named_parameters()[1].second.requires_grad_(false);
  s = nn::summary(model, randn({2, 6}));
  EXPECT_EQ(s.layers[2].trainable_params, 0);
  EXPECT_TRUE(contains(s.table, "False")) << s.table;
}

TEST(Summary, CallableFormAndUncalledModules) {
  nn::LSTM lstm(3, 5, nn::LSTMOptions().num_layers(2));
  Tensor x = randn({7, 2, 3});
  nn::ModelSummary s = nn::summary(lstm, [&] { lstm(x); });
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_EQ(s.layers[0].output_shapes, (std::vector<Shape>{{7, 2, 5}, {2, 2, 5}, {2, 2, 5}}));
  EXPECT_EQ(s.input_bytes, 7 * 2 * 3 * 4);
  // A forward() that bypasses operator() leaves the module uncalled: shown as "--", no activations.
  nn::LSTM quiet(3, 5);
  s = nn::summary(quiet, [&] { quiet.forward(x); });
  EXPECT_EQ(s.layers[0].calls, 0);
  EXPECT_EQ(s.activation_bytes, 0);
}

TEST(Summary, HooksAreRemovedWhenTheForwardThrows) {
  nn::Sequential model(nn::Linear(4, 2));
  expect_error([&] { nn::summary(model, randn({3, 5})); }, {"linear"});
  for (const auto& entry : model.named_modules()) EXPECT_FALSE(entry.second->has_forward_hooks());
  expect_error([&] { nn::summary(model, Tensor()); }, {"summary", "undefined"});
  nn::SummaryOptions bad;
  bad.optimizer_state_bytes_per_element = -1;
  expect_error([&] { nn::summary(model, randn({3, 4}), bad); }, {"summary", "optimizer_state_bytes_per_element"});
}
