// Helpers shared by the C++ op tests: exact comparisons, error-message checks and the
// straight-through building blocks of the reference compositions (written with ATen ops,
// never with the code under test).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace brevitas_cpp::test {

inline const std::vector<at::ScalarType>& float_dtypes() {
  static const std::vector<at::ScalarType> d{at::kFloat, at::kDouble, at::kHalf, at::kBFloat16};
  return d;
}

inline double nan() {
  return std::numeric_limits<double>::quiet_NaN();
}
inline double inf() {
  return std::numeric_limits<double>::infinity();
}

// A 1-D tensor of `values` in `dtype` (values are converted once, from double).
inline at::Tensor values(std::vector<double> v, at::ScalarType dtype = at::kFloat) {
  return torch::tensor(v, torch::dtype(at::kDouble)).to(dtype);
}

// The integer type of the same width, to compare floating tensors bit for bit.
inline at::ScalarType bits_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble:
      return at::kLong;
    case at::kFloat:
      return at::kInt;
    default:
      return at::kShort;  // float16, bfloat16
  }
}

// Same shape, dtype and values bit for bit (the sign of zero included), with NaN where the
// other has NaN (NaN payloads and signs are not compared).
inline ::testing::AssertionResult bitwise_equal(const at::Tensor& actual, const at::Tensor& expected) {
  if (!actual.defined() || !expected.defined()) {
    if (actual.defined() == expected.defined()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "one tensor is undefined: actual " << actual.defined() << ", expected "
                                         << expected.defined();
  }
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << "shape " << actual.sizes() << " != expected " << expected.sizes();
  }
  if (actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure() << "dtype " << actual.scalar_type() << " != expected "
                                         << expected.scalar_type();
  }
  const at::Tensor a_nan = at::isnan(actual), e_nan = at::isnan(expected);
  if (!at::equal(a_nan, e_nan)) {
    const auto idx = (a_nan != e_nan).flatten().nonzero().flatten();
    const int64_t i = idx[0].item<int64_t>();
    return ::testing::AssertionFailure() << idx.numel() << " NaN position(s) differ; first at flat index " << i
                                         << ": actual " << actual.flatten()[i].item<double>() << " expected "
                                         << expected.flatten()[i].item<double>();
  }
  const at::Tensor a = at::where(a_nan, at::zeros({}, actual.options()), actual).contiguous();
  const at::Tensor e = at::where(e_nan, at::zeros({}, expected.options()), expected).contiguous();
  const auto bits = bits_dtype(actual.scalar_type());
  const at::Tensor differ = (a.view(bits) != e.view(bits)).flatten();
  if (differ.any().item<bool>()) {
    const auto idx = differ.nonzero().flatten();
    auto f = ::testing::AssertionFailure();
    f << idx.numel() << " of " << a.numel()
      << " element(s) differ bitwise; first ones (flat index: actual vs expected):";
    for (int64_t j = 0; j < std::min<int64_t>(idx.numel(), 5); ++j) {
      const int64_t i = idx[j].item<int64_t>();
      f << "\n  " << i << ": " << c10::str(a.flatten()[i].item<double>()) << " vs "
        << c10::str(e.flatten()[i].item<double>());
    }
    return f;
  }
  return ::testing::AssertionSuccess();
}

// Values equal up to summation order (parameter gradients).
inline ::testing::AssertionResult close(const at::Tensor& actual, const at::Tensor& expected, double rtol,
                                        double atol) {
  if (!actual.defined() || !expected.defined()) {
    if (actual.defined() == expected.defined()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "one tensor is undefined: actual " << actual.defined() << ", expected "
                                         << expected.defined();
  }
  if (actual.sizes() != expected.sizes() || actual.scalar_type() != expected.scalar_type()) {
    return ::testing::AssertionFailure() << "shape/dtype " << actual.sizes() << " " << actual.scalar_type()
                                         << " != expected " << expected.sizes() << " " << expected.scalar_type();
  }
  if (at::allclose(actual, expected, rtol, atol, /*equal_nan=*/true)) return ::testing::AssertionSuccess();
  const at::Tensor err = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().flatten();
  const int64_t i = err.argmax().item<int64_t>();
  return ::testing::AssertionFailure() << "not close (rtol " << rtol << ", atol " << atol << "); worst at flat index "
                                       << i << ": " << actual.flatten()[i].item<double>() << " vs "
                                       << expected.flatten()[i].item<double>() << " (of " << actual.numel() << ")";
}

inline double grad_rtol(at::ScalarType t) {
  return t == at::kDouble ? 1e-10 : 1e-5;
}

// Expects `stmt` to throw c10::Error whose message (without backtrace) contains every string
// given. `stmt` runs once.
#define EXPECT_ERROR_CONTAINS(stmt, ...)                                                             \
  do {                                                                                               \
    bool _threw = false;                                                                             \
    std::string _msg;                                                                                \
    try {                                                                                            \
      stmt;                                                                                          \
    } catch (const c10::Error& _e) {                                                                 \
      _threw = true;                                                                                 \
      _msg = _e.what_without_backtrace();                                                            \
    }                                                                                                \
    EXPECT_TRUE(_threw) << #stmt " did not throw c10::Error";                                        \
    for (const std::string& _part : std::vector<std::string>{__VA_ARGS__}) {                         \
      EXPECT_NE(_msg.find(_part), std::string::npos) << "message lacks '" << _part << "': " << _msg; \
    }                                                                                                \
  } while (0)

// Straight-through replacement of `value` (a function of u): forward value, gradient of u.
inline at::Tensor ste(const at::Tensor& u, const at::Tensor& value) {
  return u + (value - u).detach();
}

// torch.autograd.grad(outputs=y, inputs, grad_outputs=g, allow_unused=True).
inline std::vector<at::Tensor> grads(const at::Tensor& y, const std::vector<at::Tensor>& inputs, const at::Tensor& g) {
  return torch::autograd::grad({y}, inputs, {g}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

// Fresh leaves requiring grad.
inline at::Tensor leaf(const at::Tensor& t, bool requires_grad = true) {
  return t.detach().clone(at::MemoryFormat::Preserve).requires_grad_(requires_grad);
}

// Tie values and special values: every rounding mode's edge cases.
inline std::vector<double> tie_values() {
  return {-3.5, -2.5, -1.5, -0.5, -0.0, 0.0,        0.5,         1.5,       2.5,        3.5,   -2.25,  -0.75,
          0.25, 1.75, -1.0, 1.0,  2.0,  0.49999997, -0.49999997, 1e6 + 0.5, -1e6 - 0.5, inf(), -inf(), nan()};
}

}  // namespace brevitas_cpp::test
