// abs_percentile_int_quant on the CPU: one read of x selects the k-th smallest of |x| (of
// |relu(x)|), keeping the few values above it per chunk of x, unless that value is tied (then
// torch.kthvalue picks the element, as for Brevitas); the scale follows from it (a few
// scalars), then int_quant's (relu_int_quant's) own kernel makes y, so y is its bits.
// Backward: that kernel's backward (x's straight-through gradient and the scale's), then the
// scale's gradient added at the selected element.
#include "ops/abs_percentile_int_quant.h"
#include "ops/common/bit_width_value.h"
#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

constexpr const char* kOp = "abs_percentile_int_quant";
constexpr const char* kBackwardOp = "_abs_percentile_int_quant_backward";

using scalar_math::abs_of;
using scalar_math::isnan_of;

// The ranked value of x: |x|, or |relu(x)| (0 for x <= 0); NaN stays NaN.
template <typename T, bool kRelu>
inline T ranked_value(T x) {
  if constexpr (kRelu) {
    return (x > T(0) || isnan_of(x)) ? abs_of(x) : T(0);
  } else {
    return abs_of(x);
  }
}

template <typename T>
struct Entry {
  T v;
  int64_t i;
};

// The order of the selection: the larger value first, NaN above every number, then the lower
// index.
template <typename T>
inline bool ranks_above(const Entry<T>& a, const Entry<T>& b) {
  const bool an = isnan_of(a.v);
  const bool bn = isnan_of(b.v);
  if (an != bn) return an;
  if (!an && a.v != b.v) return a.v > b.v;
  return a.i < b.i;
}

template <typename T>
inline bool same_value(T a, T b) {
  return (isnan_of(a) && isnan_of(b)) || a == b;
}

// The t highest-ranked entries offered so far, as a heap whose front is the lowest of them, and
// how many offered values left outside are equal to that front (ties of the k-th value).
template <typename T>
struct TopT {
  explicit TopT(int64_t t) : t(t) { heap.reserve(static_cast<size_t>(t)); }
  bool full() const { return static_cast<int64_t>(heap.size()) == t; }
  void offer(T v, int64_t i) {
    const Entry<T> e{v, i};
    if (!full()) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), ranks_above<T>);
    } else if (ranks_above(e, heap.front())) {
      const T out = heap.front().v;
      std::pop_heap(heap.begin(), heap.end(), ranks_above<T>);
      heap.back() = e;
      std::push_heap(heap.begin(), heap.end(), ranks_above<T>);
      // The value pushed out equals the new front only if the front kept its value; values
      // left outside before are below a front that rose.
      ties_outside = same_value(out, heap.front().v) ? ties_outside + 1 : 0;
    } else if (same_value(v, heap.front().v)) {
      ++ties_outside;
    }
  }
  int64_t t;
  int64_t ties_outside = 0;
  std::vector<Entry<T>> heap;
};

// The value an entry must reach to enter a full top or tie with its front (-inf while it
// fills; NaN when it holds only NaNs).
template <typename T>
inline T entry_bar(const TopT<T>& top) {
  return top.full() ? top.heap.front().v : -std::numeric_limits<T>::infinity();
}

// Offers p[b, e) (flat indices b..e-1, in increasing order) to top. A value below the bar is
// skipped before anything else; whole blocks are skipped after a vector compare.
template <typename T, bool kRelu>
void offer_range(const T* p, int64_t b, int64_t e, TopT<T>& top) {
  T bar = entry_bar(top);
  auto offer = [&](int64_t q) {
    const T v = ranked_value<T, kRelu>(p[q]);
    if (v < bar) return;  // NaN never is
    top.offer(v, q);
    bar = entry_bar(top);
  };
  int64_t j = b;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    constexpr int64_t V = Vec<T>::size();
    constexpr int64_t kBlock = 4 * V;
    const Vec<T> zero(T(0));
    for (; j + kBlock <= e; j += kBlock) {
      if (top.full()) {
        const Vec<T> tv(bar);  // a NaN bar: no value is below it, every block is read
        auto below = [&](int64_t o) {
          const Vec<T> v = Vec<T>::loadu(p + j + o);
          // at::vec::maximum propagates NaN (clamp_min's NaN is not specified): NaN is not below.
          return (kRelu ? at::vec::maximum(v, zero) : v.abs()) < tv;
        };
        const Vec<T> all_below = below(0) & below(V) & below(2 * V) & below(3 * V);
        if (all_below.zero_mask() == 0) continue;
      }
      for (int64_t q = j; q < j + kBlock; ++q) offer(q);
    }
  }
  for (; j < e; ++j) offer(j);
}

// The ranked values of p as a tensor, in a dtype torch.kthvalue takes on the CPU (float16 as
// float32: the same order, so the same selection).
template <typename T, bool kRelu>
at::Tensor ranked_tensor(const T* p, int64_t n, at::ScalarType dtype) {
  const at::ScalarType out_type = dtype == at::kHalf ? at::kFloat : dtype;
  at::Tensor a = at::empty({n}, at::TensorOptions().dtype(out_type));
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, out_type, "ranked_tensor", [&] {
    scalar_t* pa = a.mutable_data_ptr<scalar_t>();
    at::parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) pa[j] = static_cast<scalar_t>(ranked_value<T, kRelu>(p[j]));
    });
  });
  return a;
}

// The k-th smallest ranked value of the n values at p, and the index torch.kthvalue gives for
// it (the element Brevitas's AbsPercentile differentiates). With one element of that value the
// index is its own, found in one read of p; ties (and a k-th value far from the top) take
// torch.kthvalue itself, whose choice among equal values is its selection algorithm's.
template <typename T, bool kRelu>
Entry<T> select_kth(const T* p, int64_t n, int64_t k, at::ScalarType dtype) {
  const int64_t t = n - k + 1;  // its rank from the top
  constexpr int64_t kFew = 64;  // streaming pays while the kept values are few per block
  if (t * kFew <= n) {
    // One chunk per thread: each chunk pays for filling its own top.
    const int64_t chunks =
        std::max<int64_t>(1, std::min<int64_t>((n + kGrainSize - 1) / kGrainSize, at::get_num_threads()));
    const int64_t size = (n + chunks - 1) / chunks;
    std::vector<TopT<T>> tops;
    tops.reserve(static_cast<size_t>(chunks));
    for (int64_t c = 0; c < chunks; ++c) tops.emplace_back(t);  // each with its own reserve
    at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) offer_range<T, kRelu>(p, c * size, std::min(n, (c + 1) * size), tops[c]);
    });
    std::vector<Entry<T>> all;
    for (const TopT<T>& top : tops) all.insert(all.end(), top.heap.begin(), top.heap.end());
    std::sort(all.begin(), all.end(), ranks_above<T>);
    const Entry<T> kth = all[static_cast<size_t>(t - 1)];
    int64_t equal = 0;
    for (const Entry<T>& e : all) equal += same_value(e.v, kth.v);
    // A chunk's values left outside are at most its front, itself at most the k-th value.
    for (const TopT<T>& top : tops) equal += top.full() && same_value(top.heap.front().v, kth.v) ? top.ties_outside : 0;
    if (equal == 1) return kth;
  }
  const at::Tensor a = ranked_tensor<T, kRelu>(p, n, dtype);
  const auto [value, index] = at::kthvalue(a, k);
  return {static_cast<T>(value.item<double>()), index.item<int64_t>()};
}

// The element offset of logical (row-major) flat index i in t.
int64_t offset_of(const at::Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.size(d);
    off += (i % size) * t.stride(d);
    i /= size;
  }
  return off;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant_cpu(
    const at::Tensor& x, const std::optional<at::Tensor>& /*zero_grad_param: autograd only*/,
    const at::Tensor& bit_width, int64_t k, bool is_signed, bool narrow_range, std::optional<double> scaling_min_val,
    c10::string_view rounding_mode, bool clamp_ste, bool relu) {
  ops::detail::check_abs_percentile_int_quant_args(x, bit_width, k, scaling_min_val, rounding_mode, kOp);
  const int64_t b = check_bit_width(bit_width, kOp);
  // The index is in x's logical order: a strided x is selected from a contiguous copy.
  const at::Tensor xc = x.contiguous();
  const int64_t n = xc.numel();
  at::Tensor scale = at::empty({}, x.options());
  at::Tensor stat = at::empty({}, x.options());
  at::Tensor index = at::empty({}, x.options().dtype(at::kLong));
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), kOp, [&] {
    using T = scalar_t;
    const T* p = xc.const_data_ptr<T>();
    const at::ScalarType dtype = x.scalar_type();
    const Entry<T> s = relu ? select_kth<T, true>(p, n, k, dtype) : select_kth<T, false>(p, n, k, dtype);
    T c = s.v;
    if (scaling_min_val.has_value()) {
      const T lo = static_cast<T>(*scaling_min_val);
      c = c < lo ? lo : c;  // ScalarSignedClampMinSte of a value >= 0 (NaN passes)
    }
    const T thr = int_scaling_threshold_as<T>(static_cast<double>(b), bit_width.scalar_type(), is_signed, narrow_range);
    const T sc = static_cast<T>(c / thr);
    TORCH_CHECK(scalar_math::is_normal_scale(sc), "brevitas_cpp::", kOp,
                ": the scale (the k-th smallest |x|, clamped, / threshold) must be ", normal_scale_range(dtype),
                ", got ", static_cast<double>(sc), " from ", static_cast<double>(s.v), " at flat index ", s.i,
                " (k = ", k, "; x must be finite there; without scaling_min_val, that |x| must be at least ",
                "threshold = ", static_cast<double>(thr), " times that bound)");
    *scale.mutable_data_ptr<T>() = sc;
    *stat.mutable_data_ptr<T>() = c;
    *index.mutable_data_ptr<int64_t>() = s.i;
  });
  const at::Tensor zero = cpu_zero_scalar(x.scalar_type());
  at::Tensor y = relu ? relu_int_quant_cpu(x, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste)
                      : int_quant_cpu(x, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {y, scale, stat, index};
}

at::Tensor abs_percentile_int_quant_backward_cpu(const std::optional<at::Tensor>& grad,
                                                 const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                                 const at::Tensor& scale, const at::Tensor& index,
                                                 const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                                 c10::string_view rounding_mode, bool clamp_ste, bool relu) {
  ops::detail::check_abs_percentile_int_quant_backward_args(grad, grad_scale, x, scale, index, bit_width,
                                                            rounding_mode);
  const int64_t b = check_bit_width(bit_width, kBackwardOp);
  const int64_t i = *index.const_data_ptr<int64_t>();
  TORCH_CHECK(i >= 0 && i < x.numel(), "brevitas_cpp::", kBackwardOp, ": index must be in [0, x.numel()) = [0, ",
              x.numel(), "), got ", i);
  at::Tensor gx, gs;
  if (grad.has_value()) {
    // The forward's check, for direct calls (without grad the scale is not read).
    check_scale(scale, ScaleRange::kNormal, kBackwardOp);
    const at::Tensor zero = cpu_zero_scalar(x.scalar_type());
    const std::array<bool, 4> mask{true, true, false, false};
    auto grads = relu ? relu_int_quant_backward_cpu(*grad, x, scale, zero, bit_width, is_signed, narrow_range,
                                                    rounding_mode, clamp_ste, mask)
                      : int_quant_backward_cpu(*grad, x, std::nullopt, scale, zero, bit_width, is_signed, narrow_range,
                                               rounding_mode, clamp_ste, mask);
    gx = std::get<0>(grads);
    gs = std::get<1>(grads);
  } else {
    // y got no gradient: the composition's int_quant node never runs; x's gradient is the
    // scale's path alone, added to index_select's zeros.
    gx = at::zeros_like(x);
    if (!grad_scale.has_value()) return gx;
  }
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), kBackwardOp, [&] {
    using T = scalar_t;
    const T xi = x.const_data_ptr<T>()[offset_of(x, i)];
    // ReLU's backward zeroes the whole sum at x <= 0 (gx already holds that 0).
    if (relu && xi <= T(0)) return;
    // The composition's autograd: the scale's gradient (the sum over its two uses), / threshold,
    // straight through the clamp, times sgn of the selected |x| (0 for NaN, as torch.sgn), then
    // added from index_select's zeros (+0 + g) to x's other gradient.
    T g;
    if (gs.defined() && grad_scale.has_value()) {
      g = static_cast<T>(*grad_scale->const_data_ptr<T>() + *gs.const_data_ptr<T>());
    } else {
      g = gs.defined() ? *gs.const_data_ptr<T>() : *grad_scale->const_data_ptr<T>();
    }
    const T thr = int_scaling_threshold_as<T>(static_cast<double>(b), bit_width.scalar_type(), is_signed, narrow_range);
    const T g_stat = static_cast<T>(g / thr);
    const T g_sel = static_cast<T>(T(0) + static_cast<T>(g_stat * scalar_math::sign(xi)));
    T& out = gx.mutable_data_ptr<T>()[offset_of(gx, i)];
    out = static_cast<T>(out + g_sel);
  });
  return gx;
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
