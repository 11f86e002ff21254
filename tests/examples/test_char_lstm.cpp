// The char_lstm example's model and loop (examples/char_lstm_model.h): padded steps change
// neither the loss nor the gradients, truncated BPTT carries the state between chunks, a short
// training run lowers the loss, and generation is reproducible and stays inside the vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../../examples/char_lstm_model.h"
#include "tapegrad/tapegrad.h"

namespace tapegrad {
namespace {

using examples::CharModel;
using examples::CharModelConfig;
using examples::ChunkLoss;

CharModel small_model(uint64_t seed, int64_t vocab = 11) {
  manual_seed(seed);
  CharModelConfig config;
  config.vocab = vocab;
  config.embedding = 4;
  config.hidden = 5;
  config.layers = 2;
  CharModel model(config);
  model.to(kFloat64);  // double precision, so that "the same" can mean 1e-12
  return model;
}

// The summed loss (nats) over a batch's real targets, run in chunks of bptt steps.
Tensor summed_loss(CharModel& model, const Example& batch, int64_t bptt, bool carry_state = true) {
  Tensor total;
  examples::for_each_bptt_chunk(
      model, batch, bptt, kCPU,
      [&](const ChunkLoss& chunk) {
        Tensor part = chunk.loss * double(chunk.targets);
        total = total.defined() ? total + part : part;
      },
      carry_state);
  return total;
}

std::vector<Tensor> gradients(CharModel& model) {
  std::vector<Tensor> grads;
  for (const Tensor& p : model.parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : zeros_like(p));
  return grads;
}

double max_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, abs(a[i] - b[i]).max().item());
  return worst;
}

const std::vector<std::vector<int64_t>> kSequences = {
    {2, 4, 5, 6, 7, 8, 9, 10, 3}, {2, 6, 6, 3}, {2, 10, 9, 8, 7, 3}, {2, 5, 3}};

TEST(CharLstm, PaddedBatchGivesTheLossAndGradientsOfEachSequenceAlone) {
  CharModel model = small_model(3);
  const Example batch = collate_lm(kSequences);
  ASSERT_GT(padding_stats(batch).padded, 0);  // the batch really holds padding

  Tensor batch_loss = summed_loss(model, batch, 1000);
  model.zero_grad();
  batch_loss.backward();
  const std::vector<Tensor> batch_grads = gradients(model);

  double alone_loss = 0;
  std::vector<Tensor> alone_grads;
  for (const auto& sequence : kSequences) {
    Tensor loss = summed_loss(model, collate_lm({sequence}), 1000);
    model.zero_grad();
    loss.backward();
    std::vector<Tensor> g = gradients(model);
    if (alone_grads.empty())
      alone_grads = g;
    else
      for (size_t i = 0; i < g.size(); ++i) alone_grads[i] = alone_grads[i] + g[i];
    alone_loss += loss.item();
  }
  EXPECT_NEAR(batch_loss.item(), alone_loss, 1e-12 * std::abs(alone_loss));
  EXPECT_LT(max_difference(batch_grads, alone_grads), 1e-12);

  // The final state of each row is the state after its own last character.
  NoGradGuard no_grad;
  CharModel::Output out = model.forward(batch.input, {}, {}, batch.lengths);
  for (size_t b = 0; b < kSequences.size(); ++b) {
    const Example alone = collate_lm({kSequences[b]});
    CharModel::Output single = model.forward(alone.input, {}, {}, alone.lengths);
    EXPECT_LT(abs(out.h_n.narrow(1, int64_t(b), 1) - single.h_n).max().item(), 1e-12) << "row " << b;
    EXPECT_LT(abs(out.c_n.narrow(1, int64_t(b), 1) - single.c_n).max().item(), 1e-12) << "row " << b;
  }

  // Negative controls: targets at padded steps that are not ignored change the loss, and without
  // lengths the LSTM runs through the padding, changing the final states of the shorter rows.
  Example unmasked = batch;
  unmasked.target = where(eq(batch.target, -100.0), full_like(batch.target, 5.0), batch.target);
  EXPECT_GT(std::abs(summed_loss(model, unmasked, 1000).item() - alone_loss), 1e-3);
  CharModel::Output no_lengths = model.forward(batch.input);
  EXPECT_GT(abs(no_lengths.h_n.narrow(1, 1, 1) - out.h_n.narrow(1, 1, 1)).max().item(), 1e-6);
}

TEST(CharLstm, TruncatedBpttCarriesTheStateBetweenChunks) {
  CharModel model = small_model(5);
  const Example batch = collate_lm(kSequences);
  NoGradGuard no_grad;
  const double whole = summed_loss(model, batch, 1000).item();
  for (int64_t bptt : {1, 2, 3, 8})
    EXPECT_NEAR(summed_loss(model, batch, bptt).item(), whole, 1e-12 * whole) << "bptt " << bptt;
  // Negative control: restarting every chunk from zeros loses the context.
  EXPECT_GT(std::abs(summed_loss(model, batch, 3, /*carry_state=*/false).item() - whole), 1e-4);

  // evaluate_nats is the same mean whatever the chunk length.
  TextDataset data(kSequences);
  const double nats = examples::evaluate_nats(model, data, 2, 1000, kCPU);
  EXPECT_NEAR(examples::evaluate_nats(model, data, 2, 2, kCPU), nats, 1e-12);
  EXPECT_NEAR(nats * 18, whole, 1e-9);  // 18 predicted characters in all
  EXPECT_NEAR(examples::bits(std::log(2.0)), 1.0, 1e-15);
}

TEST(CharLstm, TrainBatchStepsOncePerChunkAndClips) {
  CharModel model = small_model(7);
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.0));
  const Example batch = collate_lm(kSequences);
  examples::TrainTotals totals;
  examples::train_batch(model, opt, batch, 3, 1e-3, kCPU, totals);
  EXPECT_EQ(totals.steps, 3);  // ceil(8 / 3) chunks, one step each
  EXPECT_EQ(totals.targets, 18);
  EXPECT_EQ(totals.padding.real, 18);
  EXPECT_EQ(totals.padding.padded, 8 * 4 - 18);
  // With lr 0 nothing moves, so the summed chunk losses are the whole batch's loss...
  NoGradGuard no_grad;
  EXPECT_NEAR(totals.loss_sum, summed_loss(model, batch, 1000).item(), 1e-9);
  // ...and the last chunk's gradient was clipped to norm 1e-3.
  double squares = 0;
  for (const Tensor& p : model.parameters())
    if (p.grad().defined()) squares += (p.grad() * p.grad()).sum().item();
  EXPECT_NEAR(std::sqrt(squares), 1e-3, 1e-8);
}

TEST(CharLstm, ShortTrainingRunLowersTheLoss) {
  std::vector<std::string> texts = {"the cat sat on the mat.", "a cat sat on a hat.", "the hat sat on the cat."};
  Vocab vocab = Vocab::build(texts, TokenLevel::Char);
  std::vector<std::vector<int64_t>> records;
  for (int copy = 0; copy < 4; ++copy)
    for (const std::string& text : texts) {
      std::vector<int64_t> ids{Vocab::kBosId};
      for (int64_t id : vocab.encode(text)) ids.push_back(id);
      ids.push_back(Vocab::kEosId);
      records.push_back(ids);
    }
  TextDataset data(records);
  manual_seed(11);
  CharModelConfig config;
  config.vocab = vocab.size();
  config.embedding = 8;
  config.hidden = 32;
  config.layers = 2;
  CharModel model(config);
  optim::Adam opt(model.parameters(), optim::AdamOptions(1e-2));
  const double before = examples::evaluate_nats(model, data, 4, 8, kCPU);
  BucketBatchSamplerOptions options;
  options.batch_size = 4;
  options.seed = 1;
  BucketBatchSampler sampler(data.lengths(), options);
  for (int64_t epoch = 0; epoch < 25; ++epoch)
    for (const auto& indices : sampler.batches(epoch)) {
      examples::TrainTotals totals;
      examples::train_batch(model, opt, data.get_batch(indices), 8, 1.0, kCPU, totals);
    }
  const double after = examples::evaluate_nats(model, data, 4, 8, kCPU);
  EXPECT_NEAR(before, std::log(double(vocab.size())), 0.5);  // about uniform at the start
  EXPECT_LT(after, 0.5 * before) << "before " << before << " after " << after;

  // Greedy continuation learnt the text; sampling is reproducible and stays in the vocabulary.
  Generator g1(3), g2(3);
  const std::string greedy = examples::generate(model, vocab, "a cat s", 40, 0.0, g1, kCPU);
  EXPECT_EQ(greedy.rfind("at on ", 0), 0u) << greedy;
  const std::string s1 = examples::generate(model, vocab, "the ", 60, 1.0, g1, kCPU);
  const std::string s2 = examples::generate(model, vocab, "the ", 60, 1.0, g2, kCPU);
  EXPECT_EQ(s1, s2);  // greedy draws nothing, so g1 and g2 were at the same point
  EXPECT_LE(s1.size(), 60u);
  for (char ch : s1) EXPECT_NE(vocab.id(static_cast<unsigned char>(ch)), Vocab::kUnkId) << s1;
}

}  // namespace
}  // namespace tapegrad
