// The sweep's grid and --curves: the names the docs give are there, a choice keeps the grid's
// order and batches, and a wrong name is an error that says which names there are.
#include <gtest/gtest.h>

#include "sweep/sweep_grid.h"
#include "tapegrad/core/error.h"

using namespace tapegrad;
using namespace tapegrad::bench;

namespace {

std::vector<std::string> names_of(const std::vector<SweepCurve>& curves) {
  std::vector<std::string> names;
  for (const SweepCurve& c : curves) names.push_back(c.name);
  return names;
}

}  // namespace

TEST(SweepGrid, QuickAndFullGridsHaveTheDocumentedCurves) {
  EXPECT_EQ(names_of(sweep_grid(true)), (std::vector<std::string>{"mlp_seed", "lstm_small"}));
  const std::vector<SweepCurve> full = sweep_grid(false);
  EXPECT_EQ(names_of(full),
            (std::vector<std::string>{"mlp_seed", "mlp_fashion", "mlp W=64", "mlp W=256", "mlp W=1024", "mlp W=4096",
                                      "lstm_row", "lstm_small", "lstm_large", "char_lstm", "lstm H=64", "lstm H=256",
                                      "lstm H=1024", "lstm T=10", "lstm T=200"}));
  for (const SweepCurve& c : full)
    if (c.name == "char_lstm") EXPECT_EQ(c.batches, (std::vector<int64_t>{1, 4, 16, 32, 64, 256}));
}

TEST(SweepGrid, CurvesAreChosenByNameInTheGridsOrder) {
  const std::vector<SweepCurve> full = sweep_grid(false);
  const std::vector<SweepCurve> chosen = select_curves(full, "char_lstm,mlp W=256,mlp_seed,char_lstm");
  EXPECT_EQ(names_of(chosen), (std::vector<std::string>{"mlp_seed", "mlp W=256", "char_lstm"}));
  EXPECT_EQ(chosen[2].batches, (std::vector<int64_t>{1, 4, 16, 32, 64, 256}));
  EXPECT_EQ(chosen[2].shape.kind, ModelKind::CharLm);
}

TEST(SweepGrid, UnknownOrEmptyChoicesAreErrors) {
  const std::vector<SweepCurve> full = sweep_grid(false);
  try {
    select_curves(full, "mlp_seed,lstm_huge");
    FAIL() << "an unknown curve was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--curves"), std::string::npos) << message;
    EXPECT_NE(message.find("'lstm_huge'"), std::string::npos) << message;
    EXPECT_NE(message.find("char_lstm"), std::string::npos) << message;  // the names there are
  }
  EXPECT_THROW(select_curves(full, ""), Error);
  EXPECT_THROW(select_curves(full, "mlp_seed,"), Error);  // an empty name is not a curve either
}
