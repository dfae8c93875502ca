#include "ops/common/param_layout.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

namespace brevitas_cpp {

namespace {
// Shortest run of one parameter value worth walking as its own run (a 512-bit float vector).
constexpr int64_t kMinRunLength = 16;
// Largest span of gathered parameters (per parameter) that folding may create.
constexpr int64_t kMaxFoldedSpan = int64_t(1) << 20;

// The stride of `p` along dimension d of a dense tensor of `ndim` dims it broadcasts to
// (right-aligned), as p.expand(...) would give it: 0 where p has size 1 or no such dim.
int64_t broadcast_stride(const at::Tensor& p, int64_t d, int64_t ndim, int64_t size) {
  const int64_t pd = d - (ndim - p.dim());
  return (pd >= 0 && p.size(pd) == size && size != 1) ? p.stride(pd) : 0;
}

// Whether strides st over sizes walk K consecutive elements (row-major, innermost last).
bool is_contiguous_span(const std::vector<int64_t>& sizes, const std::vector<int64_t>& st) {
  int64_t expected = 1;
  for (size_t j = sizes.size(); j-- > 0;) {
    if (st[j] != expected) return false;
    expected *= sizes[j];
  }
  return true;
}

// acc_a[0, K) into out's contiguous storage, rounded once from double to T; with acc_b, each
// of the two rounded to T and then added in T (two uses of one parameter).
template <typename T>
void store_rounded(const double* acc_a, const double* acc_b, int64_t K, at::Tensor& out) {
  T* po = out.mutable_data_ptr<T>();
  for (int64_t k = 0; k < K; ++k) {
    po[k] = acc_b == nullptr ? static_cast<T>(acc_a[k])
                             : static_cast<T>(static_cast<T>(acc_a[k]) + static_cast<T>(acc_b[k]));
  }
}

// Common case of fold_to / fold_sum_to: the parameter has exactly the K entries, in the order
// of its own contiguous layout (span dims already in dimension order: per tensor, per output
// channel). The result is then the sums rounded to the parameter's dtype, written straight
// into it: one allocation instead of a double tensor folded by view ops and a dtype copy.
// float and double round double -> T exactly as the copy kernel does; float16/bfloat16 (and
// any other layout) get an undefined tensor here and take the general path.
at::Tensor fold_directly(const ParamLayout& L, const double* acc_a, const double* acc_b, const at::Tensor& param) {
  const auto type = param.scalar_type();
  if (param.numel() != L.K || !std::is_sorted(L.span_dims.begin(), L.span_dims.end()) ||
      (type != at::kFloat && type != at::kDouble)) {
    return at::Tensor();
  }
  at::Tensor out = at::empty(param.sizes(), at::TensorOptions().dtype(type).device(param.device()));
  if (type == at::kFloat) {
    store_rounded<float>(acc_a, acc_b, L.K, out);
  } else {
    store_rounded<double>(acc_a, acc_b, L.K, out);
  }
  return out;
}
}  // namespace

at::Tensor empty_output_like(const at::Tensor& x, at::ScalarType dtype) {
  // What empty_like(x, Preserve) allocates, in one dispatcher call where empty_like makes two
  // (it calls empty_strided): every op allocates its outputs here, on every step.
  // A tensor with gaps (rare) takes empty_like itself, which infers dense strides in x's order.
  const auto options = x.options().dtype(dtype);
  if (x.is_non_overlapping_and_dense()) return at::empty_strided_symint(x.sym_sizes(), x.sym_strides(), options);
  return at::empty_like(x, options, at::MemoryFormat::Preserve);
}

at::Tensor cpu_zero_scalar(at::ScalarType dtype) {
  // Zero is all-zero bytes in every floating dtype; the memory is never written (const by
  // contract), so one static block serves every call without an allocation.
  alignas(16) static const unsigned char kZeroBytes[16] = {};
  TORCH_INTERNAL_ASSERT(c10::elementSize(dtype) <= sizeof(kZeroBytes));
  return at::from_blob(const_cast<unsigned char*>(kZeroBytes), {}, at::TensorOptions().dtype(dtype));
}

at::Tensor dense_or_contiguous(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

at::Tensor with_layout_of(const at::Tensor& t, const at::Tensor& like) {
  if (t.strides() == like.strides()) return t;
  return empty_output_like(like, t.scalar_type()).copy_(t);
}

ParamLayout make_param_layout(const at::Tensor& dense, c10::ArrayRef<at::Tensor> params, at::ScalarType dtype,
                              bool fold_short_runs) {
  ParamLayout L;
  L.ndim = dense.dim();
  const auto sizes = dense.sizes();
  const auto strides = dense.strides();

  // Dimensions of size > 1 in memory order (largest stride first).
  std::vector<int64_t> order;
  for (int64_t d = 0; d < dense.dim(); ++d) {
    if (sizes[d] > 1) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });

  // A parameter varies along dim d when its own (right-aligned) size there is x's. Sizes,
  // not strides: an expanded parameter has stride 0 yet its gradient keeps that dim.
  auto param_varies = [&](const at::Tensor& p, int64_t d) {
    const int64_t pd = d - (L.ndim - p.dim());
    return pd >= 0 && p.size(pd) == sizes[d];
  };

  // The block [first, last] of memory-order dims along which some parameter varies.
  int64_t first = -1, last = -1;
  for (int64_t j = 0; j < static_cast<int64_t>(order.size()); ++j) {
    const bool varies =
        std::any_of(params.begin(), params.end(), [&](const at::Tensor& p) { return param_varies(p, order[j]); });
    if (varies) {
      if (first < 0) first = j;
      last = j;
    }
  }

  const int64_t ndims = static_cast<int64_t>(order.size());
  auto extent = [&](int64_t from, int64_t to) {  // product of the sizes of order[from, to)
    int64_t p = 1;
    for (int64_t j = from; j < to; ++j) p *= sizes[order[j]];
    return p;
  };
  if (first < 0) {  // Every parameter is a single value.
    L.inner = dense.numel();
  } else {
    // Runs shorter than a vector (per-channel 3x3 kernels: 9) would leave every vector
    // partly empty; folding the trailing dims into the span gives full vectors whose
    // parameters are loaded per lane, at the cost of K * inner gathered parameters.
    const int64_t inner = extent(last + 1, ndims);
    if (fold_short_runs && inner > 1 && inner < kMinRunLength && extent(first, last + 1) * inner <= kMaxFoldedSpan)
      last = ndims - 1;
    L.outer = extent(0, first);
    L.K = extent(first, last + 1);
    L.inner = extent(last + 1, ndims);
    for (int64_t j = first; j <= last; ++j) {
      L.span_dims.push_back(order[j]);
      L.span_sizes.push_back(sizes[order[j]]);
    }
  }

  L.params.reserve(params.size());
  for (const auto& p : params) {
    // p's strides over the span, as p.expand(sizes) would have them (0 where p broadcasts).
    std::vector<int64_t> st;
    st.reserve(L.span_dims.size());
    for (int64_t d : L.span_dims) st.push_back(broadcast_stride(p, d, L.ndim, sizes[d]));
    // When p already holds its K values contiguously in x's dtype (always so per tensor, and
    // for a per-channel parameter of x's shape), params gets a K-long alias of p's memory,
    // made without a dispatcher call (it keeps p's storage alive); otherwise a K-long copy.
    if (p.scalar_type() == dtype && is_contiguous_span(L.span_sizes, st)) {
      L.params.push_back(
          at::from_blob(const_cast<void*>(p.const_data_ptr()), {L.K}, [keep_alive = p](void*) {}, p.options()));
    } else {
      L.params.push_back(p.as_strided(L.span_sizes, st, p.storage_offset()).to(dtype).contiguous().reshape({L.K}));
    }
  }
  return L;
}

at::Tensor ParamLayout::fold_to(const double* acc_k, const at::Tensor& param) const {
  if (at::Tensor out = fold_directly(*this, acc_k, nullptr, param); out.defined()) return out;
  at::Tensor owned = at::empty({K}, at::TensorOptions().dtype(at::kDouble));
  std::copy(acc_k, acc_k + K, owned.mutable_data_ptr<double>());
  return fold_tensor_to(owned, param);
}

at::Tensor ParamLayout::fold_sum_to(const double* acc_a, const double* acc_b, const at::Tensor& param) const {
  // One allocation where two folds and an add_ make three dispatcher calls, same rounding.
  if (at::Tensor out = fold_directly(*this, acc_a, acc_b, param); out.defined()) return out;
  return fold_to(acc_a, param).add_(fold_to(acc_b, param));
}

at::Tensor ParamLayout::fold_tensor_to(const at::Tensor& acc_k, const at::Tensor& param) const {
  if (param.numel() == K && std::is_sorted(span_dims.begin(), span_dims.end())) {
    return acc_k.to(param.scalar_type()).reshape(param.sizes()).contiguous();
  }
  // acc_k's K entries are laid out over span_dims in memory order: view them that way,
  // move the dims back to their original order, and insert size-1 dims elsewhere.
  std::vector<int64_t> perm(span_dims.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return span_dims[a] < span_dims[b]; });
  at::Tensor t = acc_k.reshape(span_sizes).permute(perm);
  std::vector<int64_t> full(ndim, 1);
  for (size_t j = 0; j < span_dims.size(); ++j) full[span_dims[j]] = span_sizes[j];
  t = t.reshape(full);
  return t.sum_to_size(param.sizes()).to(param.scalar_type()).contiguous();
}

}  // namespace brevitas_cpp
