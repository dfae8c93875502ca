// ParamLayout: how broadcast parameters line up with a dense tensor's memory order.
// Every element's flat memory index is (o * K + k) * inner + i and its parameters are the
// k-th entries of K-long vectors; fold_to maps K accumulators back to a parameter's shape.
#include "ops/common/param_layout.h"

#include "../../test_utils.h"

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

struct Expect {
  int64_t outer, K, inner;
};

::testing::AssertionResult has_layout(const ParamLayout& L, Expect e) {
  if (L.outer == e.outer && L.K == e.K && L.inner == e.inner) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "outer/K/inner " << L.outer << "/" << L.K << "/" << L.inner << " != expected "
                                       << e.outer << "/" << e.K << "/" << e.inner;
}

// Every element's parameter, read through the layout: p_k at memory index (o * K + k) * inner + i,
// scattered back to x's logical positions. Must equal the parameter broadcast to x.
at::Tensor param_through_layout(const ParamLayout& L, size_t which, const at::Tensor& dense) {
  const at::Tensor k_of_mem = at::arange(L.K, at::kLong).view({1, L.K, 1}).expand({L.outer, L.K, L.inner}).reshape(-1);
  const at::Tensor per_mem = L.params[which].index_select(0, k_of_mem);
  // A tensor with dense's strides whose memory holds per_mem.
  at::Tensor out = at::empty_like(dense, per_mem.options());
  at::Tensor storage_view = out.as_strided({out.numel()}, {1}, out.storage_offset());
  // dense is non-overlapping and dense, so its memory is exactly numel elements from its lowest address.
  storage_view.copy_(per_mem);
  return out;
}

TEST(ParamLayout, PerTensorPerChannelDim0AndDim1) {
  const at::Tensor x = at::empty({4, 3, 2, 2});
  for (const auto& s : {at::full({}, 0.5), at::full({1}, 0.5), at::full({1, 1, 1, 1}, 0.5)}) {
    const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {1, 1, 48})) << s.sizes();
    EXPECT_TRUE(L.span_dims.empty());
    ASSERT_EQ(L.params.size(), 1u);
    EXPECT_TRUE(bitwise_equal(L.params[0], at::full({1}, 0.5)));
  }
  {  // PerChannelDim0
    const at::Tensor x = at::empty({4, 3, 4, 4});
    const at::Tensor s = at::arange(1, 5, at::kFloat).view({4, 1, 1, 1});
    const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {1, 4, 48}));
    EXPECT_EQ(L.span_dims, (std::vector<int64_t>{0}));
    EXPECT_EQ(L.span_sizes, (std::vector<int64_t>{4}));
    EXPECT_TRUE(bitwise_equal(L.params[0], s.flatten()));
    EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  }
  {  // Dim1OfNCHW
    const at::Tensor x = at::empty({2, 3, 4, 5});
    const at::Tensor s = at::arange(1, 4, at::kFloat).view({1, 3, 1, 1});
    const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {2, 3, 20}));
    EXPECT_EQ(L.span_dims, (std::vector<int64_t>{1}));
    EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  }
}

TEST(ParamLayout, ChannelsLast) {
  const at::Tensor x = at::empty({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  // Memory order N, H, W, C: the channel is innermost.
  const at::Tensor s = at::arange(1, 4, at::kFloat).view({1, 3, 1, 1});
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
  EXPECT_TRUE(has_layout(L, {40, 3, 1}));
  EXPECT_EQ(L.span_dims, (std::vector<int64_t>{1}));
  const at::Tensor expected = s.expand(x.sizes()).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor got = param_through_layout(L, 0, x);
  EXPECT_EQ(got.strides(), x.strides());
  EXPECT_TRUE(bitwise_equal(got, expected));
  // Per output channel on a channels_last tensor: N is outermost.
  const at::Tensor s0 = at::arange(1, 3, at::kFloat).view({2, 1, 1, 1});
  const ParamLayout L0 = make_param_layout(x, {s0}, at::kFloat);
  EXPECT_TRUE(has_layout(L0, {1, 2, 60}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(L0, 0, x), s0.expand(x.sizes()).contiguous()));
}

TEST(ParamLayout, LastDimAndPermuted) {
  const at::Tensor x = at::empty({2, 3, 4, 5});
  const at::Tensor s = at::arange(1, 6, at::kFloat);
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
  EXPECT_TRUE(has_layout(L, {24, 5, 1}));
  EXPECT_EQ(L.span_dims, (std::vector<int64_t>{3}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  {  // PermutedTensorFollowsMemoryOrder
    // Logical [3, 4, 5] whose dim 0 is innermost in memory.
    const at::Tensor x = at::empty({5, 4, 3}).permute({2, 1, 0});
    ASSERT_EQ(x.strides(), (c10::IntArrayRef{1, 3, 12}));
    const at::Tensor s = at::arange(1, 4, at::kFloat).view({3, 1, 1});
    const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {20, 3, 1}));
    EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  }
}

TEST(ParamLayout, SeveralDimsSeveralParamsAndSizeOneDims) {
  const at::Tensor x = at::empty({2, 3, 4, 16});
  // One parameter over dims 1 and 2 (per group), another per tensor.
  const at::Tensor s = at::arange(12, at::kDouble).view({1, 3, 4, 1});
  const at::Tensor z = at::full({}, 7.0, at::kDouble);
  const ParamLayout L = make_param_layout(x, {s, z}, at::kFloat);
  EXPECT_TRUE(has_layout(L, {2, 12, 16}));
  EXPECT_EQ(L.span_dims, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(L.span_sizes, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(L.params.size(), 2u);
  // Cast to the requested dtype, K long; the per-tensor one repeated.
  EXPECT_TRUE(bitwise_equal(L.params[0], at::arange(12, at::kFloat)));
  EXPECT_TRUE(bitwise_equal(L.params[1], at::full({12}, 7.f)));
  EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).to(at::kFloat).contiguous()));
  // Parameters varying along different dims: the K block spans both (dims 0..1).
  const at::Tensor a = at::arange(2, at::kFloat).view({2, 1, 1, 1});
  const at::Tensor b = at::arange(3, at::kFloat).view({1, 3, 1, 1});
  const ParamLayout Lab = make_param_layout(x, {a, b}, at::kFloat);
  EXPECT_TRUE(has_layout(Lab, {1, 6, 64}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(Lab, 0, x), a.expand(x.sizes()).contiguous()));
  EXPECT_TRUE(bitwise_equal(param_through_layout(Lab, 1, x), b.expand(x.sizes()).contiguous()));
  // Dims 0 and 3 vary: the block spans 0..3 (everything).
  const at::Tensor c = at::arange(16, at::kFloat);
  const ParamLayout Lac = make_param_layout(x, {a, c}, at::kFloat);
  EXPECT_TRUE(has_layout(Lac, {1, 384, 1}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(Lac, 1, x), c.expand(x.sizes()).contiguous()));
  {  // SizeOneDimsAreSkipped
    const at::Tensor x = at::empty({1, 3, 1, 16});
    const at::Tensor s = at::arange(1, 4, at::kFloat).view({1, 3, 1, 1});
    const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {1, 3, 16}));
    EXPECT_EQ(L.span_dims, (std::vector<int64_t>{1}));
  }
}

TEST(ParamLayout, ExpandedParameterKeepsItsShape) {
  // An expanded parameter (stride 0) still varies along its dims as far as the layout and its
  // gradient are concerned: K follows the sizes, fold_to returns the full parameter shape.
  const at::Tensor x = at::empty({4, 3, 4, 4});
  const at::Tensor s = at::full({1, 1, 1, 1}, 0.5).expand({4, 1, 1, 1});
  ASSERT_EQ(s.stride(0), 0);
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
  EXPECT_TRUE(has_layout(L, {1, 4, 48}));
  EXPECT_TRUE(bitwise_equal(L.params[0], at::full({4}, 0.5f)));
  const std::vector<double> acc{1., 2., 3., 4.};
  EXPECT_TRUE(bitwise_equal(L.fold_to(acc.data(), s), test::values({1., 2., 3., 4.}).view({4, 1, 1, 1})));
}

TEST(ParamLayout, ShortRunsFoldTheInnerDimsIntoTheSpan) {
  // Per output channel of a depthwise 3x3 conv weight: runs of 9 would leave vectors partly empty,
  // so the trailing dims join the span (K = 4 * 9, inner = 1), the parameter gathered per element.
  const at::Tensor x = at::empty({4, 1, 3, 3});
  const at::Tensor s = at::arange(1, 5, at::kFloat).view({4, 1, 1, 1});
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
  EXPECT_TRUE(has_layout(L, {1, 36, 1}));
  EXPECT_EQ(L.span_dims, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  // The gradient still folds back to the parameter's own shape: sums over each channel.
  const at::Tensor acc_k = at::arange(36, at::kDouble);
  EXPECT_TRUE(bitwise_equal(L.fold_to(acc_k.const_data_ptr<double>(), s),
                            acc_k.view({4, 9}).sum(1).to(at::kFloat).view({4, 1, 1, 1})));
}

TEST(ParamLayout, GpuLayoutKeepsShortRunsAndFoldsFromATensor) {
  // The GPU kernels' layout: the same weight keeps runs of 9 (K = 4, inner = 9), and the K
  // sums, held in a tensor, fold to the parameter as fold_to does from memory.
  const at::Tensor x = at::empty({4, 1, 3, 3});
  const at::Tensor s = at::arange(1, 5, at::kFloat).view({4, 1, 1, 1});
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat, /*fold_short_runs=*/false);
  EXPECT_TRUE(has_layout(L, {1, 4, 9}));
  EXPECT_TRUE(bitwise_equal(param_through_layout(L, 0, x), s.expand(x.sizes()).contiguous()));
  const at::Tensor acc_k = test::values({0.1, 2.5, -3.0, 1e10}).to(at::kDouble);
  EXPECT_TRUE(bitwise_equal(L.fold_tensor_to(acc_k, s), acc_k.to(at::kFloat).view({4, 1, 1, 1})));
  EXPECT_TRUE(bitwise_equal(L.fold_tensor_to(acc_k, s), L.fold_to(acc_k.const_data_ptr<double>(), s)));
  // A per-tensor parameter sums the K entries.
  EXPECT_EQ(L.fold_tensor_to(acc_k, at::ones({})).item<float>(), static_cast<float>(0.1 + 2.5 - 3.0 + 1e10));
}

TEST(ParamLayout, FoldTo) {
  // Channels-last with a per-channel parameter: fold K accumulators back to [1, 3, 1, 1].
  const at::Tensor x = at::empty({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor s = at::ones({1, 3, 1, 1});
  const at::Tensor zp = at::zeros({}, at::kDouble);
  const ParamLayout L = make_param_layout(x, {s, zp}, at::kFloat);
  const std::vector<double> acc{1.5, -2.0, 4.25};
  const at::Tensor fs = L.fold_to(acc.data(), s);
  EXPECT_EQ(fs.sizes(), s.sizes());
  EXPECT_EQ(fs.scalar_type(), at::kFloat);
  EXPECT_TRUE(fs.is_contiguous());
  EXPECT_TRUE(bitwise_equal(fs, test::values({1.5, -2.0, 4.25}).view({1, 3, 1, 1})));
  // A per-tensor parameter in a per-channel layout: the K entries are summed.
  const at::Tensor fz = L.fold_to(acc.data(), zp);
  EXPECT_EQ(fz.dim(), 0);
  EXPECT_EQ(fz.scalar_type(), at::kDouble);
  EXPECT_EQ(fz.item<double>(), 1.5 - 2.0 + 4.25);
  // [1] shaped per-tensor parameter keeps its shape.
  EXPECT_EQ(L.fold_to(acc.data(), at::ones({1})).sizes(), (c10::IntArrayRef{1}));
  {  // FoldToMultiDimSpanInOriginalDimOrder
    // Memory order of a [2, 3, 4] tensor permuted so dim 2 is outermost: memory order 2, 0, 1.
    const at::Tensor x = at::empty({4, 2, 3}).permute({1, 2, 0});  // logical [2, 3, 4], strides [3, 1, 6]
    ASSERT_EQ(x.strides(), (c10::IntArrayRef{3, 1, 6}));
    const at::Tensor p = at::arange(24, at::kFloat).view({2, 3, 4});
    const ParamLayout L = make_param_layout(x, {p}, at::kFloat);
    EXPECT_TRUE(has_layout(L, {1, 24, 1}));
    EXPECT_EQ(L.span_dims, (std::vector<int64_t>{2, 0, 1}));
    // params[0] is p in memory order; folding it back gives p.
    const at::Tensor pk = L.params[0].to(at::kDouble).contiguous();
    EXPECT_TRUE(bitwise_equal(pk.to(at::kFloat), p.permute({2, 0, 1}).reshape(-1)));
    EXPECT_TRUE(bitwise_equal(L.fold_to(pk.const_data_ptr<double>(), p), p));
    // A parameter over dims 0 and 2 only ([2, 1, 4]): fold sums over dim 1.
    const at::Tensor q = at::zeros({2, 1, 4});
    const at::Tensor folded = L.fold_to(pk.const_data_ptr<double>(), q);
    EXPECT_TRUE(bitwise_equal(folded, p.sum(1, /*keepdim=*/true)));
  }
}

TEST(ParamLayout, OutputLayoutHelpers) {
  const at::Tensor cl = at::empty({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(empty_output_like(cl).strides(), cl.strides());
  const at::Tensor m = empty_output_like(cl, at::kBool);
  EXPECT_EQ(m.scalar_type(), at::kBool);
  EXPECT_EQ(m.strides(), cl.strides());
  const at::Tensor t = at::randn({2, 3, 4, 5});
  const at::Tensor same = with_layout_of(t, t);
  EXPECT_TRUE(same.is_same(t));
  const at::Tensor moved = with_layout_of(t, cl);
  EXPECT_EQ(moved.strides(), cl.strides());
  EXPECT_TRUE(bitwise_equal(moved, t));
  // Not dense (every other column): empty_like's own choice of strides.
  const at::Tensor gaps = cl.slice(3, 0, 5, 2);
  ASSERT_FALSE(gaps.is_non_overlapping_and_dense());
  const at::Tensor out = empty_output_like(gaps, at::kDouble);
  EXPECT_EQ(out.sizes(), gaps.sizes());
  EXPECT_EQ(out.scalar_type(), at::kDouble);
  EXPECT_EQ(out.strides(), at::empty_like(gaps).strides());
  // A permuted dense tensor keeps its strides, and so does a Meta tensor.
  const at::Tensor perm = at::empty({4, 2, 3}).permute({1, 2, 0});
  EXPECT_EQ(empty_output_like(perm).strides(), perm.strides());
  const at::Tensor meta = at::empty({4, 2, 3}, at::TensorOptions().device(at::kMeta)).permute({2, 0, 1});
  const at::Tensor meta_out = empty_output_like(meta);
  EXPECT_TRUE(meta_out.is_meta());
  EXPECT_EQ(meta_out.strides(), meta.strides());
}

TEST(ParamLayout, FoldSumToRoundsEachSumThenAddsInTheDtype) {
  const at::Tensor x = at::empty({2, 3});
  const at::Tensor s = at::ones({3});
  const ParamLayout L = make_param_layout(x, {s}, at::kFloat);
  ASSERT_TRUE(has_layout(L, {2, 3, 1}) || has_layout(L, {1, 6, 1}) || L.K == 3);
  // a = 1 + 0.4 ulp rounds to 1 and 1 + b (b = 0.4 ulp) rounds to 1 again; the exact double
  // sum, 1 + 0.8 ulp, would round to 1 + 2^-23.
  const double ulp = std::ldexp(1.0, -23);
  const std::vector<double> a{1.0 + 0.4 * ulp, 0.5, -3.0}, b{0.4 * ulp, 0.25, 1e10};
  ASSERT_EQ(static_cast<float>(a[0] + b[0]), 1.0f + static_cast<float>(ulp));
  const at::Tensor sum = L.fold_sum_to(a.data(), b.data(), s);
  EXPECT_EQ(sum.sizes(), s.sizes());
  EXPECT_EQ(sum.scalar_type(), at::kFloat);
  EXPECT_EQ(sum[0].item<float>(), 1.0f);
  for (int64_t k = 0; k < 3; ++k) {
    const float expected = static_cast<float>(a[k]) + static_cast<float>(b[k]);
    EXPECT_EQ(sum[k].item<float>(), expected) << "k = " << k;
  }
  // The general path (a per-tensor parameter over a K of 3: the entries summed) is fold_to + fold_to.
  const at::Tensor p = at::ones({}, at::kDouble);
  const at::Tensor general = L.fold_sum_to(a.data(), b.data(), p);
  EXPECT_EQ(general.dim(), 0);
  EXPECT_EQ(general.item<double>(), (a[0] + a[1] + a[2]) + (b[0] + b[1] + b[2]));
}

TEST(ParamLayout, CpuZeroScalarIsAZeroOfEveryFloatingDtype) {
  for (const auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    const at::Tensor z = cpu_zero_scalar(dtype);
    EXPECT_EQ(z.dim(), 0);
    EXPECT_EQ(z.scalar_type(), dtype);
    EXPECT_TRUE(z.device().is_cpu());
    EXPECT_EQ(z.item<double>(), 0.0);
    EXPECT_FALSE(std::signbit(z.item<double>()));
  }
}

}  // namespace
}  // namespace brevitas_cpp
