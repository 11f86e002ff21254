// The autocast policy list (src/amp/policy.def), one test row per line of it: each listed op, run
// under AutocastGuard(kCPU, kBFloat16), casts as its category says. A lower-precision op given
// float32 inputs returns bfloat16 (the LSTM: float32 states) whose values differ from the float32
// op's by a bf16 rounding; a float32 op given bfloat16 inputs returns float32, bit for bit the op
// on those inputs converted to float32 outside the guard. Every listed op needs its runner here and
// every runner its line there; an op not listed (relu, add) keeps its inputs' type, and the table
// in docs/amp.md must be the list's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "tapegrad/tapegrad.h"

using namespace tapegrad;
using amp::AutocastCategory;

namespace {

// The floating inputs of a run: normal values made in float32 from a seed, rounded to bf16 first
// when `via_bf16`, then converted to `dtype`.
struct Inputs {
  DType dtype = kFloat32;
  bool via_bf16 = false;
  Tensor make(const Shape& shape, uint64_t seed, double scale = 1.0) const {
    Generator g(seed);
    Tensor t = randn(shape, {}, &g) * scale;
    if (via_bf16) t = t.to(kBFloat16).to(kFloat32);
    return t.to(dtype);
  }
};

using Runner = std::function<Tensor(const Inputs&)>;

Tensor class_targets() {
  return tensor(std::vector<int64_t>{1, 0, 4, 2, 3, 1}, {6});
}

// One runner per op of policy.def, by its name there.
const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> r = {
      {"mm",
       [](const Inputs& in) {
         return mm(in.make({6, 40}, 1), in.make({40, 5}, 2));
       }},
      {"bmm",
       [](const Inputs& in) {
         return bmm(in.make({2, 6, 40}, 3), in.make({2, 40, 5}, 4));
       }},
      {"addmm",
       [](const Inputs& in) {
         return addmm(in.make({6, 5}, 5), in.make({6, 40}, 6), in.make({40, 5}, 7));
       }},
      {"matmul",
       [](const Inputs& in) {
         return matmul(in.make({3, 6, 40}, 8), in.make({40, 5}, 9));
       }},
      {"linear",
       [](const Inputs& in) {
         return linear(in.make({6, 40}, 10), in.make({5, 40}, 11), in.make({5}, 12));
       }},
      {"lstm",
       [](const Inputs& in) {
         const int64_t hidden = 8;
         return lstm_layer(in.make({4, 3, 16}, 13), in.make({3, hidden}, 14), in.make({3, hidden}, 15),
                           in.make({4 * hidden, 16}, 16, 0.3), in.make({4 * hidden, hidden}, 17, 0.3),
                           in.make({4 * hidden}, 18, 0.1), in.make({4 * hidden}, 19, 0.1))
             .output;
       }},
      {"softmax",
       [](const Inputs& in) {
         return softmax(in.make({6, 7}, 20), 1);
       }},
      {"log_softmax",
       [](const Inputs& in) {
         return log_softmax(in.make({6, 7}, 21), 1);
       }},
      {"sum",
       [](const Inputs& in) {
         return sum(in.make({6, 7}, 22), {1});
       }},
      {"mean",
       [](const Inputs& in) {
         return mean(in.make({6, 7}, 23), {0});
       }},
      {"var",
       [](const Inputs& in) {
         return var(in.make({6, 7}, 24), {1});
       }},
      {"layer_norm",
       [](const Inputs& in) {
         return layer_norm(in.make({6, 7}, 25), {7}, in.make({7}, 26), in.make({7}, 27));
       }},
      {"cross_entropy",
       [](const Inputs& in) {
         return cross_entropy(in.make({6, 5}, 28), class_targets());
       }},
      {"nll_loss",
       [](const Inputs& in) {
         return nll_loss(in.make({6, 5}, 29), class_targets());
       }},
      {"mse_loss",
       [](const Inputs& in) {
         return mse_loss(in.make({6, 7}, 30), in.make({6, 7}, 31));
       }},
      {"l1_loss",
       [](const Inputs& in) {
         return l1_loss(in.make({6, 7}, 32), in.make({6, 7}, 33));
       }},
      {"smooth_l1_loss",
       [](const Inputs& in) {
         return smooth_l1_loss(in.make({6, 7}, 34), in.make({6, 7}, 35));
       }},
      {"huber_loss",
       [](const Inputs& in) {
         return huber_loss(in.make({6, 7}, 36), in.make({6, 7}, 37));
       }},
      {"binary_cross_entropy_with_logits",
       [](const Inputs& in) {
         return binary_cross_entropy_with_logits(in.make({6, 7}, 38), in.make({6, 7}, 39, 0.3));
       }},
  };
  return r;
}

std::vector<double> values(const Tensor& t) {
  return t.to(kFloat64).contiguous().reshape({-1}).tolist<double>();
}

class AutocastPolicy : public ::testing::TestWithParam<amp::AutocastPolicyRow> {};

TEST_P(AutocastPolicy, TheOpCastsAsListed) {
  const amp::AutocastPolicyRow row = GetParam();
  auto runner = runners().find(row.op);
  ASSERT_NE(runner, runners().end()) << "policy.def lists " << row.op << " but this test has no runner for it";
  if (row.category == AutocastCategory::LowerPrecision) {
    const Inputs f32{kFloat32, false};
    const Tensor plain = runner->second(f32);
    Tensor lowered;
    {
      amp::AutocastGuard autocast(kCPU, kBFloat16);
      lowered = runner->second(f32);
    }
    ASSERT_EQ(plain.dtype(), kFloat32);
    // The LSTM keeps its gates, cell state and outputs in float32 (docs/amp.md); the others return
    // the low type.
    EXPECT_EQ(lowered.dtype(), std::string(row.op) == "lstm" ? kFloat32 : kBFloat16) << row.op;
    const std::vector<double> a = values(plain), b = values(lowered);
    ASSERT_EQ(a.size(), b.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
      max_abs = std::max(max_abs, std::fabs(a[i]));
    }
    EXPECT_GT(max_diff, 0.0) << row.op << ": the products were not rounded under autocast";
    EXPECT_LT(max_diff, 0.05 * std::max(1.0, max_abs)) << row.op << ": more than a bf16 rounding apart";
  } else {
    Tensor cast;
    {
      amp::AutocastGuard autocast(kCPU, kBFloat16);
      cast = runner->second(Inputs{kBFloat16, false});
    }
    const Tensor reference = runner->second(Inputs{kFloat32, true});  // the same values, float32, no guard
    EXPECT_EQ(cast.dtype(), kFloat32) << row.op;
    EXPECT_EQ(values(cast), values(reference)) << row.op << ": not the float32 op on the converted inputs";
    // Without the guard the op keeps its bf16 inputs' type (the cast is autocast's doing).
    EXPECT_EQ(runner->second(Inputs{kBFloat16, false}).dtype(), kBFloat16) << row.op;
  }
}

std::string row_name(const ::testing::TestParamInfo<amp::AutocastPolicyRow>& info) {
  return info.param.op;
}

INSTANTIATE_TEST_SUITE_P(Rows, AutocastPolicy, ::testing::ValuesIn(amp::kAutocastPolicy), row_name);

TEST(AutocastPolicyList, EveryRunnerIsAListedOp) {
  std::set<std::string> listed;
  for (const amp::AutocastPolicyRow& row : amp::kAutocastPolicy) {
    EXPECT_TRUE(listed.insert(row.op).second) << row.op << " is listed twice";
    EXPECT_STREQ(amp::autocast_op_name(static_cast<amp::AutocastOp>(listed.size() - 1)), row.op);
  }
  for (const auto& [name, runner] : runners()) EXPECT_TRUE(listed.count(name)) << name << " is not in policy.def";
}

// The negative control: ops that the list leaves out run in their inputs' type under the guard.
TEST(AutocastPolicyList, AnOpNotListedKeepsItsInputsType) {
  amp::AutocastGuard autocast(kCPU, kBFloat16);
  const Inputs bf16{kBFloat16, false};
  EXPECT_EQ(relu(bf16.make({4, 5}, 40)).dtype(), kBFloat16);
  EXPECT_EQ((bf16.make({4, 5}, 41) + bf16.make({4, 5}, 42)).dtype(), kBFloat16);
  EXPECT_EQ(relu(Inputs{}.make({4, 5}, 43)).dtype(), kFloat32);
}

// docs/amp.md's table, between its markers, is the list's.
TEST(AutocastPolicyList, TheDocsTableIsTheList) {
  std::ifstream in(TAPEGRAD_SOURCE_DIR "/docs/amp.md");
  ASSERT_TRUE(in.good());
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string open = "<!-- autocast policy: src/amp/policy.def -->\n", close = "<!-- end of the policy -->";
  const size_t start = doc.find(open);
  ASSERT_NE(start, std::string::npos) << "docs/amp.md has no " << open;
  const size_t end = doc.find(close, start);
  ASSERT_NE(end, std::string::npos);
  std::ostringstream table;
  table << "| op | under autocast |\n| --- | --- |\n";
  for (const amp::AutocastPolicyRow& row : amp::kAutocastPolicy)
    table << "| `" << row.op << "` | " << amp::autocast_category_name(row.category) << " |\n";
  EXPECT_EQ(doc.substr(start + open.size(), end - start - open.size()), table.str())
      << "docs/amp.md's autocast table and src/amp/policy.def disagree; the table should read:\n"
      << table.str();
}

}  // namespace
