// Every named configuration builds, has PyTorch's parameter names, and trains: one step on the CPU
// gives a finite loss near ln(10) (random labels over 10 classes) and changes the weights; the same
// step on CUDA agrees when a GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "models/named_configs.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

// A smaller stand-in with the same structure, so the test stays fast for the large configurations.
ModelShape shrunk(const ModelShape& shape) {
  if (shape.kind == ModelKind::Mlp) return shape;
  if (shape.kind == ModelKind::CharLm)
    return ModelShape::char_lm(shape.num_classes, 16, std::min<int64_t>(shape.hidden_size, 32), shape.num_layers, 12);
  return ModelShape::lstm(shape.input_size, std::min<int64_t>(shape.hidden_size, 64),
                          std::min<int64_t>(shape.seq_len, 12));
}

}  // namespace

TEST(NamedConfigs, NamesAreTheDocumentedOnes) {
  std::vector<std::string> names;
  for (const NamedConfig& c : named_configs()) names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"mlp_seed", "mlp_fashion", "lstm_row", "lstm_small", "lstm_large", "char_lstm"}));
  EXPECT_EQ(named_config("lstm_small").batch_sizes, (std::vector<int64_t>{1, 16, 64, 256}));
  EXPECT_THROW(named_config("lstm_huge"), Error);
}

TEST(NamedConfigs, ParameterNamesMatchPyTorch) {
  std::set<std::string> mlp, lstm;
  for (auto& [name, t] : build_model(named_config("mlp_fashion").shape)->named_parameters()) mlp.insert(name);
  for (auto& [name, t] : build_model(named_config("lstm_row").shape)->named_parameters()) lstm.insert(name);
  EXPECT_EQ(mlp, (std::set<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  EXPECT_EQ(lstm, (std::set<std::string>{"lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0",
                                         "fc.weight", "fc.bias"}));
}

TEST(NamedConfigs, CharLstmHasTheExamplesNames) {
  std::set<std::string> names;
  for (auto& [name, t] : build_model(named_config("char_lstm").shape)->named_parameters()) names.insert(name);
  std::set<std::string> expected = {"embedding.weight", "head.weight", "head.bias"};
  for (int layer = 0; layer < 2; ++layer)
    for (const char* w : {"weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l"})
      expected.insert("lstm." + std::string(w) + std::to_string(layer));
  EXPECT_EQ(names, expected);
}

// The char_lstm batches: padded to their longest row, ids in [1, V) inside a row and padding (id 0,
// target -100) after it, targets shifted by one, lengths near each other as bucketing makes them.
TEST(NamedConfigs, CharLstmBatchesArePaddedLikeTheExamples) {
  const ModelShape& shape = named_config("char_lstm").shape;
  Generator g(11);
  int64_t real = 0, padded = 0;
  for (const Batch& b : make_batches(shape, 32, 16, &g)) {
    ASSERT_EQ(b.x.dim(), 2);
    ASSERT_EQ(b.x.size(1), 32);
    const std::vector<int64_t> lengths = b.lengths.tolist<int64_t>();
    const int64_t steps = b.x.size(0);
    EXPECT_LE(steps, shape.seq_len);
    EXPECT_EQ(steps, *std::max_element(lengths.begin(), lengths.end()));
    for (int64_t r = 0; r < 32; ++r) {
      const int64_t n = lengths[static_cast<size_t>(r)];
      ASSERT_GE(n, 1);
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t x = b.x[t][r].item<int64_t>(), y = b.y[t][r].item<int64_t>();
        if (t < n) {
          EXPECT_TRUE(x >= 1 && x < shape.num_classes && y >= 1 && y < shape.num_classes) << t << " " << r;
          if (t + 1 < n) EXPECT_EQ(y, b.x[t + 1][r].item<int64_t>());
        } else {
          EXPECT_EQ(x, 0);
          EXPECT_EQ(y, -100);
        }
      }
      real += n;
    }
    padded += steps * 32;
  }
  const double padding_share = 1.0 - static_cast<double>(real) / static_cast<double>(padded);
  EXPECT_LT(padding_share, 0.3);  // bucketed: far from the ~60% of random lengths padded to 128
  EXPECT_GT(padding_share, 0.0);  // and some padding, so the masking is exercised
  EXPECT_NEAR(mean_char_chunk_length(128), 93.16, 0.01);
}

// Padded steps add nothing: the loss of a batch equals the loss over its rows run alone, weighted by
// their lengths.
TEST(NamedConfigs, CharLstmLossIgnoresPadding) {
  const ModelShape shape = ModelShape::char_lm(116, 16, 32, 2, 128);  // char_lstm's lengths, narrower
  auto model = build_model(shape, nullptr);
  Generator g(5);
  std::vector<Batch> pool = make_batches(shape, 4, 8, &g);
  auto padded = std::find_if(pool.begin(), pool.end(),
                             [](const Batch& b) { return min(b.lengths).item<int64_t>() < b.x.size(0); });
  ASSERT_NE(padded, pool.end()) << "no batch of this seed has padding";
  const Batch& b = *padded;
  const std::vector<int64_t> lengths = b.lengths.tolist<int64_t>();
  NoGradGuard no_grad;
  const double batch_loss = training_loss(shape, *model, b).item();
  double weighted = 0, total = 0;
  for (int64_t r = 0; r < 4; ++r) {
    const int64_t n = lengths[static_cast<size_t>(r)];
    Batch one{b.x.narrow(0, 0, n).narrow(1, r, 1).contiguous(), b.y.narrow(0, 0, n).narrow(1, r, 1).contiguous(),
              tensor(std::vector<int64_t>{n}, {1})};
    weighted += training_loss(shape, *model, one).item() * static_cast<double>(n);
    total += static_cast<double>(n);
  }
  EXPECT_NEAR(batch_loss, weighted / total, 1e-5);
  // Negative control: were the padded targets counted (as id 1 here), the loss would change.
  Batch counted{b.x, where(eq(b.y, -100.0), ones_like(b.y), b.y), b.lengths};
  EXPECT_GT(std::abs(training_loss(shape, *model, counted).item() - batch_loss), 1e-4);
}

TEST(NamedConfigs, EachTrainsOneStepOnTheCpu) {
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    ModelShape shape = shrunk(config.shape);
    TrainingRun run(shape, 4, kCPU, /*seed=*/3, config.lr, /*pool=*/2);
    Tensor before = run.model().parameters().front().clone();
    double loss = run.step().item();
    run.synchronize();
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, std::log(static_cast<double>(shape.num_classes)), 1.0);  // random labels
    EXPECT_GT(sum(abs(run.model().parameters().front() - before)).item(), 0.0);
    EXPECT_EQ(run.steps_done(), 1);
  }
}

// The forward's share of the FLOP count, by hand for one MLP and one LSTM: the inference
// comparison divides by it, so a slip here would misreport every GFLOP/s it prints.
TEST(NamedConfigs, ForwardFlopsByHand) {
  EXPECT_DOUBLE_EQ(named_config("mlp_seed").shape.gemm_forward_flops_per_example(), 2.0 * (1000 * 512 + 512 * 10));
  // lstm_small: 50 steps of [4H x (I + H)], then the head [10 x H] once.
  EXPECT_DOUBLE_EQ(named_config("lstm_small").shape.gemm_forward_flops_per_example(),
                   2.0 * (50.0 * 4 * 128 * (32 + 128) + 128 * 10));
  for (const NamedConfig& c : named_configs()) {
    SCOPED_TRACE(c.name);
    EXPECT_GT(c.shape.gemm_forward_flops_per_example(), 0.0);
    // Training adds one or two backward products per forward one.
    EXPECT_GT(c.shape.gemm_flops_per_example(), 2 * c.shape.gemm_forward_flops_per_example());
    EXPECT_LE(c.shape.gemm_flops_per_example(), 3 * c.shape.gemm_forward_flops_per_example());
  }
}

namespace {

// A CharLm batch whose rows all have `length` real steps (the ids do not matter to the count).
Batch char_batch_of_length(int64_t length, int64_t rows = 4) {
  return {zeros({length, rows}, TensorOptions(kInt64)), zeros({length, rows}, TensorOptions(kInt64)),
          full({rows}, static_cast<double>(length), TensorOptions(kInt64))};
}

}  // namespace

// A batch's own work: the same as the shape's for fixed-shape kinds; for CharLm, proportional to
// its rows' mean length, where the shape's count uses the corpus's mean.
TEST(NamedConfigs, FlopsOfOneBatch) {
  Generator data(1);
  for (const char* name : {"mlp_seed", "lstm_small"}) {
    const ModelShape& shape = named_config(name).shape;
    const Batch b = make_batches(shape, 3, 1, &data)[0];
    EXPECT_DOUBLE_EQ(shape.gemm_flops_per_example(b), shape.gemm_flops_per_example()) << name;
    EXPECT_DOUBLE_EQ(shape.gemm_forward_flops_per_example(b), shape.gemm_forward_flops_per_example()) << name;
  }
  const ModelShape& chars = named_config("char_lstm").shape;
  const double mean = mean_char_chunk_length(chars.seq_len);
  for (int64_t length : {1, 50, 128}) {
    const Batch b = char_batch_of_length(length);
    EXPECT_NEAR(chars.gemm_flops_per_example(b), chars.gemm_flops_per_example() * length / mean,
                1e-9 * chars.gemm_flops_per_example());
    EXPECT_NEAR(chars.gemm_forward_flops_per_example(b), chars.gemm_forward_flops_per_example() * length / mean,
                1e-9 * chars.gemm_forward_flops_per_example());
  }
  // Rows of different lengths count their mean: padding is not work.
  Batch mixed = char_batch_of_length(100);
  mixed.lengths = tensor(std::vector<int64_t>{100, 20, 60, 20}, {4});
  EXPECT_NEAR(chars.gemm_flops_per_example(mixed), chars.gemm_flops_per_example(char_batch_of_length(50)),
              1e-9 * chars.gemm_flops_per_example());
  Batch no_lengths = char_batch_of_length(10);
  no_lengths.lengths = Tensor();
  try {
    chars.gemm_flops_per_example(no_lengths);
    FAIL() << "a CharLm batch without lengths was counted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs its lengths"), std::string::npos) << e.what();
  }
}

// The work a median step time is divided into: the median over the pool of each batch's work (the
// median of an even count is the mean of the middle two, as the step times' median is).
TEST(NamedConfigs, MedianBatchFlopsOfAPool) {
  const ModelShape& chars = named_config("char_lstm").shape;
  const auto work = [&](int64_t length) { return chars.gemm_flops_per_example(char_batch_of_length(length)); };
  std::vector<Batch> pool;
  for (int64_t length : {128, 10, 128, 50, 128}) pool.push_back(char_batch_of_length(length));
  EXPECT_DOUBLE_EQ(median_batch_gemm_flops_per_example(chars, pool), work(128));
  pool.push_back(char_batch_of_length(10));  // 10, 10, 50, 128, 128, 128: between 50 and 128
  EXPECT_NEAR(median_batch_gemm_flops_per_example(chars, pool), 0.5 * (work(50) + work(128)), 1e-9 * work(128));
  EXPECT_NEAR(median_batch_gemm_flops_per_example(chars, pool, /*forward_only=*/true),
              chars.gemm_forward_flops_per_example(char_batch_of_length(89)), 1e-9 * work(128));
  // The mean over the pool, for mean step times: (10 + 10 + 50 + 3 x 128) / 6 = 75.67 steps.
  EXPECT_NEAR(mean_batch_gemm_flops_per_example(chars, pool), work(128) * (454.0 / 6) / 128, 1e-9 * work(128));
  // Fixed-shape kinds and an empty pool: the shape's own count.
  Generator data(2);
  const ModelShape& mlp = named_config("mlp_seed").shape;
  EXPECT_DOUBLE_EQ(median_batch_gemm_flops_per_example(mlp, make_batches(mlp, 8, 3, &data)),
                   mlp.gemm_flops_per_example());
  EXPECT_DOUBLE_EQ(median_batch_gemm_flops_per_example(chars, {}), chars.gemm_flops_per_example());
  EXPECT_DOUBLE_EQ(mean_batch_gemm_flops_per_example(mlp, make_batches(mlp, 8, 3, &data)),
                   mlp.gemm_flops_per_example());
}

// model_output is what training_loss takes the cross-entropy of, and under InferenceMode (eval) it
// gives the same logits as with the tape on.
TEST(NamedConfigs, ModelOutputIsTheLossInput) {
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    const ModelShape shape = shrunk(config.shape);
    Generator init(2), data(3);
    auto model = build_model(shape, &init);
    const Batch b = make_batches(shape, 3, 1, &data).front();
    const Tensor logits = model_output(shape, *model, b);
    const Tensor targets = shape.kind == ModelKind::CharLm ? b.y.reshape({-1}) : b.y;
    EXPECT_EQ(logits.size(0), targets.size(0));
    EXPECT_EQ(logits.size(1), shape.num_classes);
    EXPECT_DOUBLE_EQ(cross_entropy(logits, targets).item(), training_loss(shape, *model, b).item());
    model->eval();
    InferenceMode inference;
    const Tensor served = model_output(shape, *model, b);
    EXPECT_TRUE(served.is_inference());
    EXPECT_EQ(max(abs(served - logits)).item(), 0.0);
  }
}

TEST(NamedConfigs, SameSeedSameLoss) {
  ModelShape shape = shrunk(named_config("lstm_small").shape);
  TrainingRun a(shape, 3, kCPU, 7), b(shape, 3, kCPU, 7);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.step().item(), b.step().item());
}

TEST(NamedConfigs, CudaStepMatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    ModelShape shape = shrunk(config.shape);
    TrainingRun cpu(shape, 8, kCPU, 5), gpu(shape, 8, kCUDA, 5);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(cpu.step().item(), gpu.step().item(), 1e-4);
  }
}

// The size a configuration's CUDA step runs at in the emulation build: lstm_small at batch 1 (the
// issue's baseline) and the MLPs as named; the rest narrower (H = 32, batch 4), since launch, GEMM and
// copy counts follow a model's structure (kind, layers, steps), not its widths.
namespace {

struct EmulatedSize {
  ModelShape shape;
  int64_t batch;
  bool full;
};
EmulatedSize emulated_size(const NamedConfig& config) {
  EmulatedSize r{config.shape, config.batch_sizes.front(), true};
  r.full = config.name == "mlp_seed" || config.name == "mlp_fashion" || config.name == "lstm_small";
  if (!r.full) {
    r.shape.hidden_size = std::min<int64_t>(r.shape.hidden_size, 32);
    if (r.shape.kind == ModelKind::CharLm) r.shape.input_size = 16;
    r.batch = std::min<int64_t>(r.batch, 4);
  }
  return r;
}

}  // namespace

// One training step of every named configuration on a CUDA device (emulated in CI) after a
// warm-up step, loss not read: it must not wait for the GPU even once. Prints what the step asks
// of the GPU (docs/benchmarks.md records these). Launch, GEMM and copy counts follow the model's
// structure (kind, layers, steps), not its widths or batch, so the configurations too slow to
// emulate at full size run narrower: lstm_small at batch 1, the baseline, runs as named.
TEST(NamedConfigs, CudaStepHasNoHostSync) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const NamedConfig& config : named_configs()) {
    SCOPED_TRACE(config.name);
    const auto [shape, batch, full] = emulated_size(config);
    TrainingRun run(shape, batch, kCUDA, /*seed=*/3, config.lr, /*pool=*/2);
    run.step();
    run.synchronize();
    const cuda::Counters c = step_counts(run);
    std::printf("[ counts   ] %-12s b=%-3lld %s%s: %llu launches, %llu gemms, %llu copies, %llu host syncs per step\n",
                config.name.c_str(), static_cast<long long>(batch), shape.describe().c_str(), full ? "" : " (narrowed)",
                static_cast<unsigned long long>(c.launches), static_cast<unsigned long long>(c.gemms),
                static_cast<unsigned long long>(c.copies), static_cast<unsigned long long>(c.host_syncs));
    // Without the caching allocator every freed tensor is a cudaFree, which waits for the device:
    // the sanitizer runs turn it off, and run these tests once more with it on.
    if (cuda::caching_allocator_enabled()) EXPECT_EQ(c.host_syncs, 0u);
    EXPECT_GT(c.launches, 0u);  // the counters see the step at all
    EXPECT_GT(c.gemms, 0u);
    // Negative control: reading the loss is a host sync, and is counted.
    const cuda::Counters before = cuda::counters();
    (void)run.step().item();
    EXPECT_GE((cuda::counters() - before).host_syncs, 1u);
  }
}

// The eager CUDA step of lstm_small at batch 1 (the baseline: 20 launches, 8 GEMMs, 5
// copies before the cuts of docs/benchmarks.md), pinned: 8 launches (the zero initial state, the
// persistent recurrence, the loss, its seed gradient and backward, the head's bias-gradient ones,
// the recurrence backward, Adam), 8 GEMMs and 3 copies (h_n, c_n, the head's bias), with no CUDA
// graph. A launch more or less anywhere in the step changes this number.
TEST(NamedConfigs, LstmSmallEagerStepLaunches) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const NamedConfig& config = named_config("lstm_small");
  const auto [shape, batch, full] = emulated_size(config);
  ASSERT_TRUE(full);
  ASSERT_EQ(batch, 1);
  TrainingRun run(shape, batch, kCUDA, /*seed=*/3, config.lr, /*pool=*/2);
  run.step();
  run.synchronize();
  const cuda::Counters c = step_counts(run);
  EXPECT_EQ(c.launches, 8u);
  EXPECT_EQ(c.gemms, 8u);
  EXPECT_EQ(c.copies, 3u);
  if (cuda::caching_allocator_enabled()) EXPECT_EQ(c.host_syncs, 0u);
  // Negative control: one launch more between the snapshots is seen as exactly one more.
  const cuda::Counters before = cuda::counters();
  (void)run.step();
  (void)zeros({1}, TensorOptions(kFloat32).device(kCUDA));
  EXPECT_EQ((cuda::counters() - before).launches, c.launches + 1);
}

// The same steps replayed from a CUDA graph (TrainingRun::capture_graph): one launch per step,
// no host sync, and the eager twin's losses and parameters exactly (the emulator runs the recorded
// kernels with the captured arguments). The batch copies into the captured inputs are copies, not
// launches. char_lstm is left out: its batches differ in length, and a graph replays fixed shapes.
TEST(NamedConfigs, CudaGraphStepIsOneLaunch) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!cuda::caching_allocator_enabled()) GTEST_SKIP() << "cuda::Graph needs the caching allocator";
  for (const NamedConfig& config : named_configs()) {
    if (config.shape.kind == ModelKind::CharLm) continue;
    SCOPED_TRACE(config.name);
    const auto [shape, batch, full] = emulated_size(config);
    (void)full;
    TrainingRun eager(shape, batch, kCUDA, /*seed=*/5, config.lr, /*pool=*/3);
    TrainingRun graphed(shape, batch, kCUDA, /*seed=*/5, config.lr, /*pool=*/3);
    for (TrainingRun* run : {&eager, &graphed}) run->step();
    graphed.capture_graph();  // its warm-up is the second step
    (void)eager.step();
    ASSERT_TRUE(graphed.replays_graph());
    const Tensor first_before = graphed.model().parameters().front().cpu().clone();
    for (int s = 0; s < 3; ++s) {
      const float expected = eager.step().item<float>();
      const cuda::Counters before = cuda::counters();
      Tensor loss = graphed.step();
      const cuda::Counters c = cuda::counters() - before;
      EXPECT_EQ(c.launches, 1u) << "step " << s;
      EXPECT_EQ(c.gemms, 0u);
      EXPECT_EQ(c.host_syncs, 0u);
      EXPECT_EQ(loss.item<float>(), expected) << "step " << s;
    }
    // The replays updated the parameters (the control: they moved) exactly as the eager steps did.
    const auto ep = eager.model().parameters(), gp = graphed.model().parameters();
    ASSERT_EQ(ep.size(), gp.size());
    EXPECT_FALSE(allclose(gp.front().cpu(), first_before, 0.0, 0.0)) << "the replays left the weights unchanged";
    for (size_t k = 0; k < ep.size(); ++k)
      EXPECT_TRUE(allclose(ep[k].cpu(), gp[k].cpu(), 0.0, 0.0)) << "parameter " << k;
  }
}
