#include "ops/clamp_ste.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"

#include <ATen/Dispatch.h>
#include <c10/util/overflows.h>
#include <torch/library.h>

#include <limits>
#include <utility>

namespace brevitas_cpp::ops {

at::Tensor tensor_clamp_ste(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  static auto op = op_handle<decltype(tensor_clamp_ste)>("brevitas_cpp::tensor_clamp_ste");
  return op.call(x, min_val, max_val);
}

at::Tensor scalar_clamp_ste(const at::Tensor& x, double min_val, double max_val) {
  static auto op = op_handle<decltype(scalar_clamp_ste)>("brevitas_cpp::scalar_clamp_ste");
  return op.call(x, min_val, max_val);
}

at::Tensor scalar_clamp_min_ste(const at::Tensor& x, double min_val) {
  static auto op = op_handle<decltype(scalar_clamp_min_ste)>("brevitas_cpp::scalar_clamp_min_ste");
  return op.call(x, min_val);
}

at::Tensor scalar_signed_clamp_min_ste(const at::Tensor& x, double min_val) {
  static auto op = op_handle<decltype(scalar_signed_clamp_min_ste)>("brevitas_cpp::scalar_signed_clamp_min_ste");
  return op.call(x, min_val);
}

namespace detail {
void check_tensor_clamp_ste_args(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  constexpr const char* op = "tensor_clamp_ste";
  check_floating(x, op, "x");
  for (const auto& [t, name] : {std::pair{&min_val, "min_val"}, std::pair{&max_val, "max_val"}}) {
    TORCH_CHECK(!t->is_complex() && t->scalar_type() != at::kBool, "brevitas_cpp::", op, ": ", name,
                " must be a real (floating or integer) tensor, got dtype ", t->scalar_type());
    check_broadcasts_to_input(*t, x, op, name);
  }
  check_same_device(x, {{&min_val, "min_val"}, {&max_val, "max_val"}}, op);
}

void check_scalar_signed_clamp_min_args(const at::Tensor& x, double min_val) {
  constexpr const char* op = "scalar_signed_clamp_min_ste";
  // The bound is a magnitude: -min_val is the upper bound of the negative side.
  TORCH_CHECK(min_val >= 0.0, "brevitas_cpp::", op, ": min_val must be >= 0 (a magnitude), got ", min_val);
  check_scalar_clamp_args(x, min_val, std::nullopt, op);
}

void check_scalar_clamp_args(const at::Tensor& x, double min_val, std::optional<double> max_val, const char* op) {
  check_floating(x, op, "x");
  check_scalar_bounds(min_val, max_val.value_or(std::numeric_limits<double>::infinity()), op);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "check_scalar_clamp_args", [&] {
    for (const auto& [v, name] :
         {std::pair{std::optional<double>(min_val), "min_val"}, std::pair{max_val, "max_val"}}) {
      const bool overflows = v && c10::overflows<scalar_t, double>(*v);
      TORCH_CHECK(!overflows, "brevitas_cpp::", op, ": ", name, " (", *v, ") cannot be converted to x's dtype ",
                  x.scalar_type(), " without overflow");
    }
  });
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("tensor_clamp_ste(Tensor x, Tensor min_val, Tensor max_val) -> Tensor");
  m.def("scalar_clamp_ste(Tensor x, float min_val, float max_val) -> Tensor");
  m.def("scalar_clamp_min_ste(Tensor x, float min_val) -> Tensor");
  m.def("scalar_signed_clamp_min_ste(Tensor x, float min_val) -> Tensor");
}

}  // namespace brevitas_cpp::ops
