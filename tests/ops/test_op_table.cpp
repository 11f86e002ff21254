// The op x backend x dtype table of tests/support/op_table.h, walked once per check: every row's
// gradients against finite differences (autograd::gradcheck, f64), its values against its reference
// formula in double for each dtype it supports, and CUDA against the CPU forward and backward for
// each dtype (skipped without a GPU; run on the emulated GPU in the emulation build). Each (row,
// dtype) is its own ctest test. A row whose reference is planted wrong must fail the value check
// (OpTableControls).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "support/gpu.h"
#include "support/op_table.h"
#include "support/parity.h"
#include "support/test_util.h"

namespace tapegrad {
namespace {

using testing::Tol;
using testing::op_table::Inputs;
using testing::op_table::OpRow;
using testing::op_table::Values;

const std::vector<OpRow>& rows() {
  static const std::vector<OpRow> table = testing::op_table::op_rows();
  return table;
}

// The value check's tolerance: a few ulps of the dtype, on values of order one.
Tol value_tolerance(const OpRow& row, DType dtype) {
  return dtype == kFloat64 ? Tol{1e-12, 1e-12} : Tol{row.f32_rtol, 1e-6};
}

// CUDA against the CPU: another order of summation and other transcendental functions.
Tol parity_tolerance(DType dtype) {
  return dtype == kFloat64 ? Tol{1e-10, 1e-12} : Tol{1e-5, 1e-6};
}

// The row's op on its inputs in `dtype`, against its reference on the same (rounded) input values.
void check_values(const OpRow& row, DType dtype) {
  const Inputs x = testing::op_table::make_inputs(row, dtype);
  Values v;
  for (const Tensor& t : x) v.push_back(testing::values(t));
  const Tensor got = row.op(x);
  ASSERT_EQ(got.dtype(), dtype) << row.name;
  const std::vector<double> want = row.reference(v);
  testing::expect_allclose(got, tensor<double>(want).reshape(got.sizes()), value_tolerance(row, dtype),
                           row.name + " in " + dtype_name(dtype));
}

// --- gradcheck: one test per row ------------------------------------------------------------

class OpTableGradcheck : public ::testing::TestWithParam<size_t> {};

TEST_P(OpTableGradcheck, MatchesFiniteDifferences) {
  const OpRow& row = rows()[GetParam()];
  Inputs leaves;
  for (size_t i = 0; i < row.inputs.size(); ++i) {
    const testing::op_table::Input& in = row.inputs[i];
    leaves.push_back(testing::leaf(in.shape, testing::op_table::seed_for(row.name, i), in.low, in.high));
  }
  const autograd::GradcheckResult result = autograd::gradcheck(row.op, leaves);
  EXPECT_TRUE(result.ok) << result.report << "max abs error " << result.max_abs_error;
}

std::vector<size_t> row_indices() {
  std::vector<size_t> r(rows().size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = i;
  return r;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTableGradcheck, ::testing::ValuesIn(row_indices()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return rows()[info.param].name; });

// --- values and parity: one test per (row, dtype) ---------------------------------------------

struct RowDtype {
  size_t row;
  DType dtype;
};

void PrintTo(const RowDtype& p, std::ostream* out) {
  *out << rows()[p.row].name << "_" << dtype_name(p.dtype);
}

std::vector<RowDtype> row_dtypes() {
  std::vector<RowDtype> r;
  for (size_t i = 0; i < rows().size(); ++i)
    for (DType dtype : rows()[i].dtypes) r.push_back({i, dtype});
  return r;
}

std::string row_dtype_name(const ::testing::TestParamInfo<RowDtype>& info) {
  return rows()[info.param.row].name + "_" + dtype_name(info.param.dtype);
}

class OpTableValues : public ::testing::TestWithParam<RowDtype> {};

TEST_P(OpTableValues, MatchReferenceFormula) {
  check_values(rows()[GetParam().row], GetParam().dtype);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTableValues, ::testing::ValuesIn(row_dtypes()), row_dtype_name);

class OpTableParity : public ::testing::TestWithParam<RowDtype> {};

TEST_P(OpTableParity, CudaMatchesCpuForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  const OpRow& row = rows()[GetParam().row];
  const DType dtype = GetParam().dtype;
  const Tol tol = parity_tolerance(dtype);
  Inputs on_cpu = testing::op_table::make_inputs(row, dtype), on_cuda;
  for (Tensor& t : on_cpu) {
    on_cuda.push_back(t.to(kCUDA).requires_grad_(true));
    t.requires_grad_(true);
  }
  const Tensor y_cpu = row.op(on_cpu), y_cuda = row.op(on_cuda);
  testing::expect_parity(y_cuda, y_cpu, tol, row.name + " forward");
  // A fixed incoming gradient, the same on both devices.
  const Tensor w = testing::uniform(y_cpu.sizes(), dtype, 99);
  (y_cpu * w).sum().backward();
  (y_cuda * w.to(kCUDA)).sum().backward();
  for (size_t i = 0; i < on_cpu.size(); ++i)
    testing::expect_parity(on_cuda[i].grad(), on_cpu[i].grad(), tol,
                           row.name + " gradient of input " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTableParity, ::testing::ValuesIn(row_dtypes()), row_dtype_name);

// --- the table itself, and the negative control -----------------------------------------------

TEST(OpTableControls, RowNamesAreUniqueAndEveryRowHasADtype) {
  std::set<std::string> names;
  for (const OpRow& row : rows()) {
    EXPECT_TRUE(names.insert(row.name).second) << "two rows named " << row.name;
    EXPECT_FALSE(row.dtypes.empty()) << row.name;
  }
}

// tanh's row with sigmoid's formula as its reference: the value check must fail it, in every dtype.
OpRow tanh_with_a_wrong_reference() {
  for (const OpRow& row : rows())
    if (row.name == "tanh") {
      OpRow wrong = row;
      wrong.reference = testing::op_table::unary([](double a) { return 1.0 / (1.0 + std::exp(-a)); });
      return wrong;
    }
  ADD_FAILURE() << "no tanh row";
  return {};
}

TEST(OpTableControls, AWrongReferenceFormulaIsFlagged) {
  for (DType dtype : {kFloat32, kFloat64})
    EXPECT_NONFATAL_FAILURE(check_values(tanh_with_a_wrong_reference(), dtype), "elements differ");
  // The twin: the right formula passes.
  for (const OpRow& row : rows())
    if (row.name == "tanh") check_values(row, kFloat64);
}

}  // namespace
}  // namespace tapegrad
