// A model written the way a LibTorch user writes one, with nothing hand-written around the library:
// a custom module with submodules (Embedding, an LSTM, a ModuleList of Linear layers and an
// activation), two parameter groups with their own learning rates, a linear warm-up followed by a
// cosine schedule (SequentialLR), gradient clipping, and a checkpoint through the state dicts. It
// must learn a small sequence task: predict whether a token sequence contains more 1s than 2s.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "support/test_util.h"

namespace tapegrad {
namespace {

class CountingModel : public nn::Module {
 public:
  CountingModel(int64_t vocab, int64_t dim, int64_t hidden, int64_t classes) {
    embed = register_module("embed", nn::Embedding(vocab, dim, /*padding_idx=*/0));
    lstm = register_module("lstm", nn::LSTM(dim, hidden));
    head = register_module("head", nn::ModuleList());
    head->push_back(nn::Linear(hidden, hidden));
    head->push_back(nn::Tanh());
    head->push_back(nn::Linear(hidden, classes));
  }

  // tokens: int64 [time, batch] -> logits [batch, classes] from the last step's hidden state.
  Tensor forward(const Tensor& tokens) {
    Tensor x = embed->forward(tokens);
    Tensor out = lstm->forward(x).output;
    Tensor last = out.select(0, out.size(0) - 1);
    for (size_t i = 0; i < head->size(); ++i) last = head->at<nn::UnaryModule>(i).forward(last);
    return last;
  }

  std::shared_ptr<nn::Embedding> embed;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::ModuleList> head;
};

struct Batch {
  Tensor tokens, labels;
};

// Tokens 1..3 (0 is padding and never drawn); label 1 when 1s outnumber 2s.
Batch make_batch(int64_t time, int64_t batch, Generator& g) {
  Tensor tokens = randint(1, 4, {time, batch}, TensorOptions(kInt64), &g);
  Tensor ones = sum(eq(tokens, 1.0).to(kInt64), {0}), twos = sum(eq(tokens, 2.0).to(kInt64), {0});
  return {tokens, gt(ones, twos).to(kInt64)};
}

double accuracy(CountingModel& model, const Batch& b) {
  NoGradGuard no_grad;
  Tensor predicted = argmax(model.forward(b.tokens), 1);
  return mean(eq(predicted, b.labels).to(kFloat64)).item();
}

TEST(LibTorchStyleTraining, CustomModelWithGroupsWarmupCosineAndClippingLearns) {
  Generator g(1234);
  manual_seed(1234);
  CountingModel model(/*vocab=*/4, /*dim=*/8, /*hidden=*/32, /*classes=*/2);
  std::printf("%s\n", model.str().c_str());

  // The recurrent body learns more slowly than the head: two groups, two learning rates.
  std::vector<Tensor> body = model.embed->parameters(), head = model.head->parameters();
  for (const Tensor& p : model.lstm->parameters()) body.push_back(p);
  optim::Adam opt({optim::ParamGroup(body).lr(1e-2), optim::ParamGroup(head).lr(3e-2)});

  constexpr int64_t kSteps = 150, kWarmup = 15;
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, kWarmup);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, kSteps - kWarmup);
  optim::SequentialLR schedule(opt, {warmup, cosine}, {kWarmup});
  EXPECT_NEAR(opt.param_groups()[0].lr(), 1e-3, 1e-12);  // warm-up starts at 0.1x
  EXPECT_NEAR(opt.param_groups()[1].lr(), 3e-3, 1e-12);

  const Batch test = make_batch(12, 256, g);
  const double before = accuracy(model, test);
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    Batch b = make_batch(12, 64, g);
    Tensor loss = cross_entropy(model.forward(b.tokens), b.labels);
    opt.zero_grad();
    loss.backward();
    Tensor norm = nn::utils::clip_grad_norm_(model.parameters(), /*max_norm=*/1.0);
    EXPECT_TRUE(std::isfinite(norm.item()));
    opt.step();
    schedule.step();
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
    if (step + 1 == kWarmup) {  // the warm-up reached the full rates, in both groups
      EXPECT_NEAR(opt.param_groups()[0].lr(), 1e-2, 1e-9);
      EXPECT_NEAR(opt.param_groups()[1].lr(), 3e-2, 1e-9);
    }
  }
  const double after = accuracy(model, test);
  std::printf("loss %.4f -> %.4f, test accuracy %.3f -> %.3f\n", first_loss, last_loss, before, after);
  EXPECT_LT(last_loss, 0.5 * first_loss);
  EXPECT_GT(after, 0.9);
  // The cosine phase ended at eta_min = 0.
  EXPECT_NEAR(opt.param_groups()[0].lr(), 0.0, 1e-9);

  // A checkpoint through the state dicts restores the model exactly.
  CountingModel restored(4, 8, 32, 2);
  restored.load_state_dict(model.state_dict());
  EXPECT_EQ(accuracy(restored, test), after);
}

}  // namespace
}  // namespace tapegrad
