#include "ops/clamp_ste.h"
#include "ops/common/checks.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

at::Tensor tensor_clamp_ste_cpu(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  ops::detail::check_tensor_clamp_ste_args(x, min_val, max_val);
  at::Tensor out = empty_output_like(x);
  if (x.numel() == 0) return out;
  const at::Tensor xd = with_layout_of(x, out);
  // Bounds are cast to x's dtype first, as Brevitas's max_val.type_as(x).
  const ParamLayout L = make_param_layout(out, {min_val, max_val}, x.scalar_type());
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "tensor_clamp_ste", [&] {
    using T = scalar_t;
    const T* px = xd.const_data_ptr<T>();
    T* py = out.mutable_data_ptr<T>();
    const T* lo = L.params[0].const_data_ptr<T>();
    const T* hi = L.params[1].const_data_ptr<T>();
    at::parallel_for(0, x.numel(), kGrainSize, [&](int64_t begin, int64_t end) {
      for_each_run(L, begin, end, [&](int64_t off, int64_t n, int64_t k, bool strided) {
        for_each_block<T>(n, [&](int64_t j, int64_t c) {
          const Vec<T> v = Vec<T>::loadu(px + off + j, c);
          const Vec<T> vmax = load_param(hi, k, j, strided, c);
          const Vec<T> vmin = load_param(lo, k, j, strided, c);
          Vec<T> y = Vec<T>::blendv(v, vmax, v > vmax);
          y = Vec<T>::blendv(y, vmin, y < vmin);
          y.store(py + off + j, c);
        });
      });
    });
  });
  return out;
}

namespace {

// torch.clamp semantics: bounds converted to x's dtype, NaN propagates.
at::Tensor clamp_kernel(const at::Tensor& x, double min_val, std::optional<double> max_val, const char* name) {
  ops::detail::check_scalar_clamp_args(x, min_val, max_val, name);
  return unary_kernel(x, name, [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    const Vec<T> lo(static_cast<T>(min_val));
    Vec<T> y = Vec<T>::blendv(v, lo, v < lo);
    if (max_val) {
      const Vec<T> hi(static_cast<T>(*max_val));
      y = Vec<T>::blendv(y, hi, y > hi);
    }
    return y;
  });
}

}  // namespace

at::Tensor scalar_clamp_ste_cpu(const at::Tensor& x, double min_val, double max_val) {
  return clamp_kernel(x, min_val, max_val, "scalar_clamp_ste");
}

at::Tensor scalar_clamp_min_ste_cpu(const at::Tensor& x, double min_val) {
  return clamp_kernel(x, min_val, std::nullopt, "scalar_clamp_min_ste");
}

at::Tensor scalar_signed_clamp_min_ste_cpu(const at::Tensor& x, double min_val) {
  ops::detail::check_scalar_signed_clamp_min_args(x, min_val);
  return unary_kernel(x, "scalar_signed_clamp_min_ste", [&](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    // The bound in x's dtype, as torch.clamp_min converts it; -lo is exact.
    const Vec<T> lo(static_cast<T>(min_val));
    const Vec<T> neg_lo = lo.neg();
    const Vec<T> positive = v >= Vec<T>(T(0));  // -0.0 counts as positive; NaN does not
    // The composition clamps |x|: -0.0 gives +0.0 (or lo), as sign (+1) * clamp_min(+0.0, lo).
    const Vec<T> a = v.abs();
    const Vec<T> up = Vec<T>::blendv(a, lo, a < lo);            // max(|x|, lo) for x >= 0
    const Vec<T> down = Vec<T>::blendv(v, neg_lo, v > neg_lo);  // min(x, -lo); NaN stays
    return Vec<T>::blendv(down, up, positive);
  });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
