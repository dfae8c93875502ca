// abs_max_int_quant on the CPU: the max-abs statistics (a vectorized reduction), the scale from
// them (K scalars), then int_quant's own kernel for the elementwise pass, so y is int_quant's
// bits. Backward: int_quant's backward kernel (w's straight-through gradient and the scale's
// gradient, reduced exactly as for the unfused quantizer), then the scale's gradient through
// _StatsScaling into the maxima of |w|.
#include "ops/abs_max_int_quant.h"
#include "ops/common/bit_width_value.h"
#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

constexpr const char* kOp = "abs_max_int_quant";
constexpr const char* kBackwardOp = "_abs_max_int_quant_backward";

using scalar_math::abs_of;
using scalar_math::isnan_of;

// max |p[j]| over [0, n), n > 0, NaN winning as in torch.max.
template <typename T>
T abs_max_serial(const T* p, int64_t n) {
  T best = T(0);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr int64_t V = Vec<T>::size();
    Vec<T> acc(T(0));
    int64_t j = 0;
    for (; j + V <= n; j += V) acc = at::vec::maximum(acc, Vec<T>::loadu(p + j).abs());
    if (j < n) acc = at::vec::maximum(acc, Vec<T>::loadu(p + j, n - j).abs());  // zero-filled lanes
    T lanes[V];
    acc.store(lanes);
    for (int64_t l = 0; l < V; ++l) {
      if (isnan_of(lanes[l])) return lanes[l];
      if (lanes[l] > best) best = lanes[l];
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const T a = abs_of(p[j]);
      if (isnan_of(a)) return a;
      if (a > best) best = a;
    }
  }
  return best;
}

template <typename T>
T combine_max(T a, T b) {
  if (isnan_of(a)) return a;
  if (isnan_of(b)) return b;
  return b > a ? b : a;
}

// max |w| over dense memory of n elements.
template <typename T>
T abs_max_all(const T* p, int64_t n) {
  const int64_t chunks = (n + kGrainSize - 1) / kGrainSize;
  if (chunks <= 1) return abs_max_serial(p, n);
  std::vector<T> part(static_cast<size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c)
      part[c] = abs_max_serial(p + c * kGrainSize, std::min(kGrainSize, n - c * kGrainSize));
  });
  T best = part[0];
  for (int64_t c = 1; c < chunks; ++c) best = combine_max(best, part[c]);
  return best;
}

// w with channel `dim` first, rows in the order of torch's w.movedim(dim, 0).reshape(C, -1).
at::Tensor rows_of(const at::Tensor& w, int64_t dim) {
  return (dim == 0 ? w : w.movedim(dim, 0)).contiguous();
}

// m[k] = max |w| over channel k (dim >= 0) or over all of w (dim < 0, one value).
template <typename T>
void abs_max_stats(const at::Tensor& w, int64_t dim, T* m) {
  if (dim < 0) {
    const at::Tensor wd = dense_or_contiguous(w);
    m[0] = abs_max_all(wd.const_data_ptr<T>(), wd.numel());
    return;
  }
  const at::Tensor rows = rows_of(w, dim);
  const int64_t C = rows.size(0);
  const int64_t R = rows.numel() / C;
  const T* p = rows.const_data_ptr<T>();
  at::parallel_for(0, C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) m[k] = abs_max_serial(p + k * R, R);
  });
}

// _StatsScaling on one statistic: c0 = ScalarSignedClampMinSte (twice: idempotent), c = |c0|,
// q = c / threshold, scale = |q|; each step rounded to T as the ATen ops round it.
template <typename T>
struct ScaleChain {
  T c0, q, scale;
};

template <typename T>
ScaleChain<T> scale_chain(T m, const std::optional<double>& min_val, T thr) {
  T c0 = m;
  if (min_val.has_value()) {
    const T lo = static_cast<T>(*min_val);
    const T neg_lo = -lo;
    const T a = abs_of(m);
    c0 = m >= T(0) ? (a < lo ? lo : a) : (m > neg_lo ? neg_lo : m);
  }
  const T c = abs_of(c0);
  const T q = static_cast<T>(c / thr);
  return {c0, q, abs_of(q)};
}

std::vector<int64_t> scale_sizes(const at::Tensor& w, int64_t dim) {
  if (dim < 0) return {};
  std::vector<int64_t> s(static_cast<size_t>(w.dim()), 1);
  s[static_cast<size_t>(dim)] = w.size(dim);
  return s;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant_cpu(const at::Tensor& w, const at::Tensor& bit_width,
                                                         std::optional<int64_t> channel_dim, bool is_signed,
                                                         bool narrow_range, std::optional<double> scaling_min_val,
                                                         c10::string_view rounding_mode, bool clamp_ste) {
  const int64_t dim =
      ops::detail::check_abs_max_int_quant_args(w, bit_width, channel_dim, scaling_min_val, rounding_mode, kOp);
  const int64_t b = check_bit_width(bit_width, kOp);
  at::Tensor scale = at::empty(scale_sizes(w, dim), w.options());
  BREVITAS_CPP_DISPATCH_FLOATING(w.scalar_type(), kOp, [&] {
    scalar_t* ps = scale.mutable_data_ptr<scalar_t>();
    abs_max_stats<scalar_t>(w, dim, ps);
    const scalar_t thr =
        int_scaling_threshold_as<scalar_t>(static_cast<double>(b), bit_width.scalar_type(), is_signed, narrow_range);
    const int64_t K = scale.numel();
    for (int64_t k = 0; k < K; ++k) {
      const scalar_t m = ps[k];
      ps[k] = scale_chain<scalar_t>(m, scaling_min_val, thr).scale;
      TORCH_CHECK(
          scalar_math::is_normal_scale(ps[k]), "brevitas_cpp::", kOp, ": the scale max|w| / threshold must be ",
          normal_scale_range(w.scalar_type()), ", got ", static_cast<double>(ps[k]),
          " from max|w| = ", static_cast<double>(m), dim < 0 ? std::string() : " in channel " + std::to_string(k),
          " (w must be finite; without scaling_min_val, max|w| must be at least threshold = ", static_cast<double>(thr),
          " times that bound)");
    }
  });
  const at::Tensor zero = cpu_zero_scalar(w.scalar_type());
  at::Tensor y = int_quant_cpu(w, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {y, scale};
}

at::Tensor abs_max_int_quant_backward_cpu(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                          const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                          std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                                          std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                          bool clamp_ste) {
  const int64_t dim = ops::detail::check_abs_max_int_quant_backward_args(grad, grad_scale, w, scale, bit_width,
                                                                         channel_dim, scaling_min_val, rounding_mode);
  const int64_t b = check_bit_width(bit_width, kBackwardOp);
  check_scale(scale, ScaleRange::kNormal, kBackwardOp);  // the forward's check, for direct calls
  const at::Tensor zero = cpu_zero_scalar(w.scalar_type());
  // w's straight-through gradient and the scale's gradient from y, as for the unfused IntQuant.
  auto [gx, gs, gz, gb] = int_quant_backward_cpu(grad, w, std::nullopt, scale, zero, bit_width, is_signed, narrow_range,
                                                 rounding_mode, clamp_ste, {true, true, false, false});
  (void)gz;
  (void)gb;
  const at::Tensor gsc = grad_scale.has_value() ? grad_scale->contiguous() : at::Tensor();
  const int64_t K = scale.numel();
  BREVITAS_CPP_DISPATCH_FLOATING(w.scalar_type(), kBackwardOp, [&] {
    using T = scalar_t;
    std::vector<T> m(static_cast<size_t>(K));
    abs_max_stats<T>(w, dim, m.data());
    const T thr = int_scaling_threshold_as<T>(static_cast<double>(b), bit_width.scalar_type(), is_signed, narrow_range);
    const T* pgs = gs.const_data_ptr<T>();
    const T* pgo = gsc.defined() ? gsc.const_data_ptr<T>() : nullptr;
    // The scale's gradient back to the statistic: |q|, / threshold, |c0| (the clamps pass it).
    std::vector<T> g3(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
      const ScaleChain<T> ch = scale_chain<T>(m[k], scaling_min_val, thr);
      // No grad_scale: a zero, added as the materialized zeros were (-0 + 0 is +0).
      const T g_total = static_cast<T>((pgo != nullptr ? pgo[k] : T(0)) + pgs[k]);
      const T g1 = static_cast<T>(g_total * scalar_math::sign(ch.q));
      const T g2 = static_cast<T>(g1 / thr);
      g3[k] = static_cast<T>(g2 * scalar_math::sign(ch.c0));
    }
    T* pgx = gx.mutable_data_ptr<T>();
    if (dim < 0) {
      // torch.max over everything: the gradient spread evenly over the elements equal to the
      // max (the NaNs when it is NaN), then |w|'s gradient sign(w).
      const at::Tensor wd = with_layout_of(w, gx);
      const T* pw = wd.const_data_ptr<T>();
      const int64_t n = wd.numel();
      const T mx = m[0];
      const bool nan_max = isnan_of(mx);
      auto ties = [&](T v) { return nan_max ? isnan_of(v) : abs_of(v) == mx; };
      const int64_t chunks = (n + kGrainSize - 1) / kGrainSize;
      std::vector<std::vector<int64_t>> found(static_cast<size_t>(chunks));
      at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
        for (int64_t c = cb; c < ce; ++c) {
          const int64_t e = std::min(n, (c + 1) * kGrainSize);
          int64_t j = c * kGrainSize;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            if (!nan_max) {
              constexpr int64_t V = Vec<T>::size();
              const Vec<T> vm(mx);
              for (; j + V <= e; j += V) {
                if (lane_bits<T>(Vec<T>::loadu(pw + j).abs() == vm) == 0) continue;
                for (int64_t l = 0; l < V; ++l)
                  if (ties(pw[j + l])) found[c].push_back(j + l);
              }
            }
          }
          for (; j < e; ++j)
            if (ties(pw[j])) found[c].push_back(j);
        }
      });
      int64_t count = 0;
      for (const auto& f : found) count += static_cast<int64_t>(f.size());
      const T share = static_cast<T>(g3[0] / static_cast<T>(count));
      for (const auto& f : found)
        for (int64_t j : f) pgx[j] = static_cast<T>(pgx[j] + static_cast<T>(share * scalar_math::sign(pw[j])));
    } else {
      // torch.max(dim): all of channel k's gradient to the index it returns (the first maximum,
      // or the first NaN), in the order of w.movedim(dim, 0).reshape(C, -1).
      const at::Tensor rows = rows_of(w, dim);
      const int64_t R = rows.numel() / K;
      const T* pr = rows.const_data_ptr<T>();
      const int64_t nd = w.dim();
      const auto sizes = w.sizes();
      const auto gstrides = gx.strides();
      for (int64_t k = 0; k < K; ++k) {
        const T mx = m[k];
        const bool nan_max = isnan_of(mx);
        const T* row = pr + k * R;
        int64_t j = 0;
        while (j < R && !(nan_max ? isnan_of(row[j]) : abs_of(row[j]) == mx)) ++j;
        if (j == R) continue;
        int64_t off = k * gstrides[dim];
        int64_t rem = j;
        for (int64_t i = nd - 1; i >= 0; --i) {
          if (i == dim) continue;
          off += (rem % sizes[i]) * gstrides[i];
          rem /= sizes[i];
        }
        pgx[off] = static_cast<T>(pgx[off] + static_cast<T>(g3[k] * scalar_math::sign(row[j])));
      }
    }
  });
  return gx;
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
