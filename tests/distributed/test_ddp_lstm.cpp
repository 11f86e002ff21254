// DistributedDataParallel on the LSTM (a module whose forward is not Tensor -> Tensor, so the test
// calls it and passes the loss to prepare_for_backward), against one process on the whole batch.
// float64; the tolerance is argued in test_ddp.cpp.
#include <cmath>

#include "distributed_test.h"
#include "tapegrad/distributed/ddp.h"

namespace tapegrad {
namespace {

using distributed::DistributedDataParallel;
using testing::world;

constexpr int64_t kSteps = 4, kTime = 5, kInput = 3, kHidden = 8, kClasses = 3, kBatch = 2;

class LstmClassifier : public nn::Module {
 public:
  explicit LstmClassifier(uint64_t seed) {
    Generator gen(seed);
    lstm = register_module("lstm", std::make_shared<nn::LSTM>(kInput, kHidden, nn::LSTMOptions().num_layers(2), &gen));
    head = register_module("head", std::make_shared<nn::Linear>(kHidden, kClasses, true, &gen));
    to(kFloat64);
  }
  std::string name() const override { return "LstmClassifier"; }
  // x [T, B, I] -> logits [B, classes] from the last layer's final hidden state.
  Tensor forward(const Tensor& x) { return head->forward(lstm->forward(x).h_n.select(0, 1)); }
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Linear> head;
};

Example sequences(int64_t step, int64_t batch) {
  Generator gen(500 + uint64_t(step));
  return {randn({kTime, batch, kInput}, kFloat64, &gen), randint(0, kClasses, {batch}, kInt64, &gen)};
}

void expect_same_weights(nn::Module& a, nn::Module& b, double tol) {
  StateDict x = a.named_parameters(), y = b.named_parameters();
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> u = testing::values(x[i].second), v = testing::values(y[i].second);
    double worst = 0;
    for (size_t k = 0; k < u.size(); ++k) worst = std::max(worst, std::abs(u[k] - v[k]));
    EXPECT_LE(worst, tol) << x[i].first;
  }
}

void run(bool accumulate) {
  const int n = world().size(), r = world().rank();
  const int micro = accumulate ? 2 : 1;
  auto model = std::make_shared<LstmClassifier>(40 + uint64_t(r));
  DistributedDataParallel ddp(model, testing::world_ptr(), distributed::DDPOptions().bucket_cap_mb(0.001));
  EXPECT_GT(ddp.bucket_parameter_names().size(), 1u);  // several buckets, started during backward
  optim::Adam opt(model->parameters(), optim::AdamOptions(1e-2));
  auto reference = std::make_shared<LstmClassifier>(40);
  optim::Adam ropt(reference->parameters(), optim::AdamOptions(1e-2));
  for (int64_t s = 0; s < kSteps; ++s) {
    Example all = sequences(s, micro * n * kBatch);
    for (int m = 0; m < micro; ++m) {
      int64_t start = (m * n + r) * kBatch;
      Tensor x = all.input.narrow(1, start, kBatch).contiguous();
      Tensor y = all.target.narrow(0, start, kBatch).contiguous();
      Tensor loss = cross_entropy(model->forward(x), y) * (1.0 / micro);
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        ddp.prepare_for_backward({loss});
        loss.backward();
      } else {
        ddp.prepare_for_backward({loss});
        loss.backward();
      }
    }
    opt.step();
    opt.zero_grad();
    cross_entropy(reference->forward(all.input), all.target).backward();
    ropt.step();
    ropt.zero_grad();
  }
  expect_same_weights(*model, *reference, 1e-10);
}

TEST(DistributedDDPLstm, MatchesOneProcessOnTheConcatenatedBatch) {
  run(false);
}
TEST(DistributedDDPLstm, NoSyncAccumulationMatchesOneProcess) {
  run(true);
}

}  // namespace
}  // namespace tapegrad
