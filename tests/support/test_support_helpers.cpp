// Negative controls for the shared test helpers of tests/support: a checker that let everything
// pass would make every parity test pass vacuously.
#include <gtest/gtest-spi.h>

#include <limits>

#include "support/gpu.h"
#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor planted() {
  return tensor<double>({1.0, 2.0, 3.0, kNaN, kInf});
}
Tensor off_by_a_tenth() {
  return tensor<double>({1.0, 2.0, 3.1, kNaN, kInf});
}
Tensor nan_for_a_number() {
  return tensor<double>({1.0, 2.0, 3.0, 4.0, kInf});
}
Tensor finite_for_infinity() {
  return tensor<double>({1.0, 2.0, 3.0, kNaN, 1e308});
}

TEST(ParityHelper, CatchesPlantedMismatches) {
  EXPECT_NONFATAL_FAILURE(testing::expect_allclose(off_by_a_tenth(), planted(), {1e-3, 0}, "tenth"), "element 2");
  EXPECT_NONFATAL_FAILURE(testing::expect_allclose(nan_for_a_number(), planted(), {1, 1}, "nan"), "element 3");
  EXPECT_NONFATAL_FAILURE(testing::expect_allclose(finite_for_infinity(), planted(), {1, 1}, "inf"), "element 4");
  EXPECT_FATAL_FAILURE(testing::expect_allclose(Tensor(), planted(), {}, "undefined"), "undefined");
}

TEST(ParityHelper, AcceptsWhatIsWithinTolerance) {
  testing::expect_allclose(planted(), planted(), testing::kExact, "itself");
  testing::expect_allclose(off_by_a_tenth(), planted(), {0.04, 0}, "within rtol");
  testing::expect_allclose(off_by_a_tenth(), planted().to(kFloat32), {0, 0.11}, "within atol, across dtypes");
  testing::expect_allclose(Tensor(), Tensor(), {}, "both undefined");
}

TEST(GpuSkip, SkipsExactlyWhenNoDeviceIsPresent) {
  SKIP_WITHOUT_GPU();
  EXPECT_TRUE(cuda::is_available());
}

}  // namespace
}  // namespace tapegrad
