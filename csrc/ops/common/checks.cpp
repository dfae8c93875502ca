#include "ops/common/checks.h"

#include "ops/common/rounding.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/TypeCast.h>

#include <cmath>
#include <sstream>

namespace brevitas_cpp {

void check_floating(const at::Tensor& t, const char* op, const char* arg) {
  const auto dtype = t.scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16,
              "brevitas_cpp::", op, ": ", arg,
              " must be a floating-point tensor (float32, float64, float16 "
              "or bfloat16), got dtype ",
              dtype);
}

void check_same_dtype_as_input(const at::Tensor& t, const at::Tensor& x, const char* op, const char* arg) {
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), "brevitas_cpp::", op, ": ", arg, " must have the dtype of x (",
              x.scalar_type(), "), got ", t.scalar_type(), "; convert it with .to(x.dtype)");
}

void check_same_device(const at::Tensor& x, c10::ArrayRef<std::pair<const at::Tensor*, const char*>> args,
                       const char* op) {
  for (const auto& [t, name] : args) {
    TORCH_CHECK(t->device() == x.device(), "brevitas_cpp::", op, ": ", name, " is on ", t->device(), " but x is on ",
                x.device(), "; all tensor arguments must be on x's device");
  }
}

void check_broadcasts_to_input(const at::Tensor& t, const at::Tensor& x, const char* op, const char* arg) {
  const auto ts = t.sym_sizes();
  const auto xs = x.sym_sizes();
  bool ok = ts.size() <= xs.size();
  for (size_t i = 0; ok && i < ts.size(); ++i) {
    const auto& a = ts[ts.size() - 1 - i];
    const auto& b = xs[xs.size() - 1 - i];
    ok = (a == 1) || (a == b);
  }
  TORCH_CHECK(ok, "brevitas_cpp::", op, ": ", arg, " of shape ", ts, " does not broadcast to x of shape ", xs,
              "; accepted: a shape that broadcasts to x without expanding it, e.g. [] or [1] per tensor, "
              "[C, 1, 1, 1] per output channel, [1, C, 1, 1] per input channel");
}

void check_single_value(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.sym_numel() == 1, "brevitas_cpp::", op, ": ", arg,
              " must hold exactly one value (shape [] or [1]), got shape ", t.sym_sizes());
}

namespace {
// Index and value of the first element of a CPU tensor failing `ok` (called with the element,
// of the tensor's dtype), or -1.
template <typename Pred>
std::pair<int64_t, double> first_failing(const at::Tensor& t, Pred ok) {
  const at::Tensor c = t.contiguous();
  std::pair<int64_t, double> bad{-1, 0.0};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "first_failing", [&] {
    const scalar_t* p = c.const_data_ptr<scalar_t>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      if (!ok(p[i])) {
        bad = {i, static_cast<double>(p[i])};
        return;
      }
    }
  });
  return bad;
}

const char* dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    default:
      return c10::toString(dtype);
  }
}
}  // namespace

std::string normal_scale_range(at::ScalarType dtype) {
  double lo = 0.0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "normal_scale_range",
                                  [&] { lo = static_cast<double>(scalar_math::smallest_normal<scalar_t>()); });
  std::ostringstream s;
  s << "a normal positive finite number (>= " << lo << " for " << dtype_name(dtype) << ")";
  return s.str();
}

void check_scale(const at::Tensor& scale, ScaleRange range, const char* op) {
  if (!scale.device().is_cpu()) return;  // Device-side checks belong to the device kernels.
  const bool normal = range == ScaleRange::kNormal;
  const auto [index, value] = first_failing(scale, [normal](auto v) {
    return normal ? scalar_math::is_normal_scale(v) : scalar_math::isfinite_of(v) && v > decltype(v)(0);
  });
  TORCH_CHECK(index < 0, "brevitas_cpp::", op, ": scale must be ",
              normal ? normal_scale_range(scale.scalar_type()) : std::string("positive and finite"), ", got ", value,
              " at flat index ", index, " (of shape ", scale.sizes(), ")");
}

void check_finite(const at::Tensor& t, const char* op, const char* arg) {
  if (!t.device().is_cpu()) return;
  const auto [index, value] = first_failing(t, [](auto v) { return scalar_math::isfinite_of(v); });
  TORCH_CHECK(index < 0, "brevitas_cpp::", op, ": ", arg, " must be finite, got ", value, " at flat index ", index,
              " (of shape ", t.sizes(), ")");
}

namespace {
// The one value of a CPU tensor, read from its memory: exact for every real dtype (a double
// holds all of them that a bit width can be), and without the two dispatcher calls of .item(),
// which every quantizer call would otherwise pay in forward and again in backward.
double cpu_single_value(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return static_cast<double>(*t.const_data_ptr<float>());
    case at::kDouble:
      return *t.const_data_ptr<double>();
    case at::kHalf:
      return static_cast<double>(static_cast<float>(*t.const_data_ptr<c10::Half>()));
    case at::kBFloat16:
      return static_cast<double>(static_cast<float>(*t.const_data_ptr<c10::BFloat16>()));
    case at::kLong:
      return static_cast<double>(*t.const_data_ptr<int64_t>());
    case at::kInt:
      return static_cast<double>(*t.const_data_ptr<int32_t>());
    case at::kShort:
      return static_cast<double>(*t.const_data_ptr<int16_t>());
    case at::kChar:
      return static_cast<double>(*t.const_data_ptr<int8_t>());
    case at::kByte:
      return static_cast<double>(*t.const_data_ptr<uint8_t>());
    default:
      return t.item<double>();  // other dtypes: rare, take the general path
  }
}
}  // namespace

void check_bit_width_dtype(const at::Tensor& bit_width, const char* op) {
  check_single_value(bit_width, op, "bit_width");
  TORCH_CHECK(!bit_width.is_complex() && bit_width.scalar_type() != at::kBool, "brevitas_cpp::", op,
              ": bit_width must be a real (integer or floating) tensor, got dtype ", bit_width.scalar_type());
}

int64_t check_bit_width(const at::Tensor& bit_width, const char* op) {
  check_bit_width_dtype(bit_width, op);
  TORCH_CHECK(bit_width.device().is_cpu(), "brevitas_cpp::", op, ": bit_width on ", bit_width.device(),
              " has no value check on this build");
  const double b = cpu_single_value(bit_width);
  TORCH_CHECK(is_valid_bit_width(b), "brevitas_cpp::", op, ": bit_width must be an integer in [1, 32], got ", b);
  return static_cast<int64_t>(b);
}

void check_scalar_bounds(double min_val, double max_val, const char* op) {
  TORCH_CHECK(!std::isnan(min_val), "brevitas_cpp::", op, ": min_val must not be NaN");
  TORCH_CHECK(!std::isnan(max_val), "brevitas_cpp::", op, ": max_val must not be NaN");
  TORCH_CHECK(min_val <= max_val, "brevitas_cpp::", op, ": min_val (", min_val, ") must be <= max_val (", max_val, ")");
}

void check_scaling_min_val(std::optional<double> scaling_min_val, const at::Tensor& x, const char* op,
                           const char* x_name) {
  if (!scaling_min_val.has_value()) return;
  const double v = *scaling_min_val;
  TORCH_CHECK(std::isfinite(v) && v >= 0.0, "brevitas_cpp::", op,
              ": scaling_min_val must be a finite number >= 0 (or None), got ", v);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "check_scaling_min_val", [&] {
    const bool overflows = c10::overflows<scalar_t, double>(v);
    TORCH_CHECK(!overflows, "brevitas_cpp::", op, ": scaling_min_val (", v, ") cannot be converted to ", x_name,
                "'s dtype ", x.scalar_type(), " without overflow");
  });
}

}  // namespace brevitas_cpp
