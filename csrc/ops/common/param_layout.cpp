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
}  // namespace

at::Tensor empty_output_like(const at::Tensor& x, at::ScalarType dtype) {
  return at::empty_like(x, x.options().dtype(dtype), at::MemoryFormat::Preserve);
}

at::Tensor dense_or_contiguous(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

at::Tensor with_layout_of(const at::Tensor& t, const at::Tensor& like) {
  if (t.strides() == like.strides()) return t;
  return at::empty_like(like, t.options()).copy_(t);
}

ParamLayout make_param_layout(const at::Tensor& dense, c10::ArrayRef<at::Tensor> params,
                              at::ScalarType dtype) {
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

  std::vector<at::Tensor> expanded;
  expanded.reserve(params.size());
  for (const auto& p : params) expanded.push_back(p.expand(sizes));

  // A parameter varies along dim d when its own (right-aligned) size there is x's. Sizes,
  // not strides: an expanded parameter has stride 0 yet its gradient keeps that dim.
  auto param_varies = [&](const at::Tensor& p, int64_t d) {
    const int64_t pd = d - (L.ndim - p.dim());
    return pd >= 0 && p.size(pd) == sizes[d];
  };

  // The block [first, last] of memory-order dims along which some parameter varies.
  int64_t first = -1, last = -1;
  for (int64_t j = 0; j < static_cast<int64_t>(order.size()); ++j) {
    const bool varies = std::any_of(params.begin(), params.end(),
                                    [&](const at::Tensor& p) { return param_varies(p, order[j]); });
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
    if (inner > 1 && inner < kMinRunLength && extent(first, last + 1) * inner <= kMaxFoldedSpan) last = ndims - 1;
    L.outer = extent(0, first);
    L.K = extent(first, last + 1);
    L.inner = extent(last + 1, ndims);
    for (int64_t j = first; j <= last; ++j) {
      L.span_dims.push_back(order[j]);
      L.span_sizes.push_back(sizes[order[j]]);
    }
  }

  for (const auto& e : expanded) {
    std::vector<int64_t> st;
    for (int64_t d : L.span_dims) st.push_back(e.stride(d));
    L.params.push_back(
        e.as_strided(L.span_sizes, st, e.storage_offset()).to(dtype).contiguous().reshape({L.K}));
  }
  return L;
}

at::Tensor ParamLayout::fold_to(const double* acc_k, const at::Tensor& param) const {
  // acc_k's K entries are laid out over span_dims in memory order: view them that way,
  // move the dims back to their original order, and insert size-1 dims elsewhere.
  std::vector<int64_t> perm(span_dims.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return span_dims[a] < span_dims[b]; });
  at::Tensor owned = at::empty({K}, at::TensorOptions().dtype(at::kDouble));
  std::copy(acc_k, acc_k + K, owned.mutable_data_ptr<double>());
  at::Tensor t = owned.reshape(span_sizes).permute(perm);
  std::vector<int64_t> full(ndim, 1);
  for (size_t j = 0; j < span_dims.size(); ++j) full[span_dims[j]] = span_sizes[j];
  t = t.reshape(full);
  return t.sum_to_size(param.sizes()).to(param.scalar_type()).contiguous();
}

}  // namespace brevitas_cpp
