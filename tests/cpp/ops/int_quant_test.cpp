// int_quant (+ _int_quant_with_mask, _int_quant_backward) from C++ through the dispatcher.
// Forward: bit for bit the contract's composition
//   t = x / s; u = t + z; r = round_mode(u); c = where(r > max, max, r); c = where(c < min, min, c);
//   y = (c - z) * s
// Backward: the autograd of that composition with round_mode as an STE (u + (round(u) - u).detach())
// and the clamp either the torch.where tensor_clamp with bounds from bit_width (clamp_ste = false)
// or straight-through (clamp_ste = true).
#include "ops/int_quant.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

const std::vector<std::string>& modes() {
  static const std::vector<std::string> m{"round", "ceil", "floor", "round_to_zero", "dpu"};
  return m;
}

at::Tensor ref_round_mode(const at::Tensor& u, const std::string& mode) {
  if (mode == "round") return at::round(u);
  if (mode == "ceil") return at::ceil(u);
  if (mode == "floor") return at::floor(u);
  if (mode == "round_to_zero") return at::sign(u) * at::floor(at::abs(u));
  if (mode == "dpu") return at::where((u < 0.) & (u - at::floor(u) == 0.5), at::ceil(u), at::round(u));
  throw std::runtime_error("unknown mode " + mode);
}

// Brevitas's max_int / min_int, in bit_width's dtype (2 ** b is torch.pow(2, b)).
at::Tensor ref_max_int(const at::Tensor& b, bool is_signed, bool narrow) {
  if (!is_signed && !narrow) return at::pow(2, b) - 1;
  if (!is_signed && narrow) return at::pow(2, b) - 2;
  return at::pow(2, b - 1) - 1;
}
at::Tensor ref_min_int(const at::Tensor& b, bool is_signed, bool narrow) {
  if (is_signed && narrow) return -at::pow(2, b - 1) + 1;
  if (is_signed) return -at::pow(2, b - 1);
  return 0 * b;
}

struct Config {
  bool is_signed = true;
  bool narrow = false;
  std::string mode = "round";
  bool clamp_ste = false;
};

// The composition. With `ste`, rounding (and, with clamp_ste, the clamp) are straight-through.
at::Tensor ref_int_quant(const at::Tensor& x, const at::Tensor& s, const at::Tensor& z, const at::Tensor& b,
                         const Config& c, bool ste) {
  const at::Tensor t = x / s;
  const at::Tensor u = t + z;
  const at::Tensor r = ste ? test::ste(u, ref_round_mode(u, c.mode)) : ref_round_mode(u, c.mode);
  const at::Tensor hi = ref_max_int(b, c.is_signed, c.narrow).type_as(x);
  const at::Tensor lo = ref_min_int(b, c.is_signed, c.narrow).type_as(x);
  auto tensor_clamp = [](const at::Tensor& v, const at::Tensor& mn, const at::Tensor& mx) {
    at::Tensor out = at::where(v > mx, mx.type_as(v), v);
    return at::where(out < mn, mn.type_as(out), out);
  };
  const at::Tensor q = (ste && c.clamp_ste) ? test::ste(r, tensor_clamp(r, lo, hi)) : tensor_clamp(r, lo, hi);
  return (q - z) * s;
}

at::Tensor run(const at::Tensor& x, const at::Tensor& s, const at::Tensor& z, const at::Tensor& b, const Config& c) {
  return ops::int_quant(x, s, z, b, c.is_signed, c.narrow, c.mode, c.clamp_ste);
}

std::vector<Config> sign_narrow_configs(const std::string& mode = "round") {
  return {{true, false, mode}, {true, true, mode}, {false, false, mode}, {false, true, mode}};
}

at::TensorOptions opts(at::ScalarType t) {
  return at::TensorOptions().dtype(t);
}

// Values hitting rounding ties after x / 0.5 (x = k / 4), clamp edges of a 4-bit range, and
// special values.
at::Tensor tie_input(at::ScalarType dtype, bool with_non_finite = true) {
  std::vector<double> v;
  for (int k = -44; k <= 44; ++k) v.push_back(k * 0.25);
  for (double s : test::tie_values()) {
    if (with_non_finite || std::isfinite(s)) v.push_back(s);
  }
  v.push_back(1e30);
  v.push_back(-1e30);
  return test::values(v, dtype);
}

// ---------------------------------------------------------------------------------------------
// Registration and schema
// ---------------------------------------------------------------------------------------------

TEST(IntQuant, SchemaIsRegisteredAndBoxedCallUsesDefaults) {
  auto& d = c10::Dispatcher::singleton();
  const auto op = d.findSchemaOrThrow("brevitas_cpp::int_quant", "");
  EXPECT_EQ(c10::str(op.schema()),
            "brevitas_cpp::int_quant(Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, bool signed, "
            "bool narrow_range, str rounding_mode=\"round\", bool clamp_ste=False) -> Tensor");
  const auto& args = op.schema().arguments();
  ASSERT_EQ(args.size(), 8u);
  ASSERT_TRUE(args[6].default_value().has_value());
  EXPECT_EQ(args[6].default_value()->toStringRef(), "round");
  ASSERT_TRUE(args[7].default_value().has_value());
  EXPECT_FALSE(args[7].default_value()->toBool());
  EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::CPU));
  EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Meta));
  EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Autograd));

  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_int_quant_with_mask", "").schema()),
            "brevitas_cpp::_int_quant_with_mask(Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, "
            "bool signed, bool narrow_range, str rounding_mode=\"round\") -> (Tensor, Tensor)");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_int_quant_backward", "").schema()),
            "brevitas_cpp::_int_quant_backward(Tensor grad, Tensor? x, Tensor? mask, Tensor scale, Tensor zero_point, "
            "Tensor bit_width, bool signed, bool narrow_range, str rounding_mode, bool clamp_ste, bool[4] output_mask) "
            "-> (Tensor, Tensor, Tensor, Tensor)");
  {  // BoxedCallThroughSchemaHandleUsesDefaults
    // The untyped handle from findSchemaOrThrow, called boxed with the defaulted arguments filled
    // in from the schema, gives the typed call's result.
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("brevitas_cpp::int_quant", "");
    const at::Tensor x = tie_input(at::kFloat), s = at::full({}, 0.5), z = at::zeros({}), b = at::full({}, 4.);
    torch::jit::Stack stack{x, s, z, b, true, false};
    for (size_t i = stack.size(); i < op.schema().arguments().size(); ++i) {
      stack.emplace_back(*op.schema().arguments()[i].default_value());
    }
    op.callBoxed(&stack);
    ASSERT_EQ(stack.size(), 1u);
    EXPECT_TRUE(bitwise_equal(stack[0].toTensor(), ops::int_quant(x, s, z, b, true, false, "round", false)));
  }
}

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

TEST(IntQuant, ForwardTiesEveryModeDtypeAndRange) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x = tie_input(dtype);
    const at::Tensor s = at::full({}, 0.5, opts(dtype));
    for (const double zp : {0.0, 3.0, -0.5, 0.25}) {
      const at::Tensor z = at::full({}, zp, opts(dtype));
      for (const auto& mode : modes()) {
        for (const auto& cfg : sign_narrow_configs(mode)) {
          for (const auto& b : {at::full({}, 4, opts(at::kLong)), at::full({1}, 4., opts(at::kFloat))}) {
            const at::Tensor y = run(x, s, z, b, cfg);
            EXPECT_TRUE(bitwise_equal(y, ref_int_quant(x, s, z, b, cfg, false)))
                << dtype << " mode " << mode << " signed " << cfg.is_signed << " narrow " << cfg.narrow << " zp " << zp
                << " bit_width dtype " << b.scalar_type();
          }
        }
      }
    }
  }
}

TEST(IntQuant, ForwardSpelledOutAndRandomValues) {
  // signed 8 bit, scale 1, zero point 0: x/s + z = x.
  const at::Tensor x = test::values({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 127.5, -128.5, 300., -300.});
  const at::Tensor s = at::ones({}), z = at::zeros({}), b = at::full({}, 8.);
  auto q = [&](const char* mode, bool narrow) { return ops::int_quant(x, s, z, b, true, narrow, mode, false); };
  EXPECT_TRUE(bitwise_equal(q("round", false), test::values({-2., -2., -0., 0., 2., 2., 127., -128., 127., -128.})));
  EXPECT_TRUE(bitwise_equal(q("dpu", false), test::values({-2., -1., -0., 0., 2., 2., 127., -128., 127., -128.})));
  EXPECT_TRUE(bitwise_equal(q("ceil", true), test::values({-2., -1., -0., 1., 2., 3., 127., -127., 127., -127.})));
  EXPECT_TRUE(bitwise_equal(q("floor", false), test::values({-3., -2., -1., 0., 1., 2., 127., -128., 127., -128.})));
  EXPECT_TRUE(
      bitwise_equal(q("ROUND_TO_ZERO", false), test::values({-2., -1., -0., 0., 1., 2., 127., -128., 127., -128.})));
  {  // ForwardRandomValuesAndScales
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      const at::Tensor x = at::randn({1000}, opts(at::kDouble)).mul(5).to(dtype);
      for (const double sv : {0.1, 0.0371, 3.3, 1e-3}) {
        const at::Tensor s = at::full({1}, sv, opts(dtype)), z = at::full({1}, 1.0, opts(dtype));
        for (const int64_t bits : {1, 2, 3, 8, 16, 24, 31, 32}) {
          for (const auto& cfg : sign_narrow_configs()) {
            if (cfg.is_signed && cfg.narrow && bits == 1) continue;  // empty range; still computed below
            const at::Tensor b = at::full({}, bits, opts(at::kInt));
            EXPECT_TRUE(bitwise_equal(run(x, s, z, b, cfg), ref_int_quant(x, s, z, b, cfg, false)))
                << dtype << " scale " << sv << " bits " << bits << " signed " << cfg.is_signed << " narrow "
                << cfg.narrow;
          }
        }
      }
    }
  }
  {  // OneBitSignedNarrowFollowsTheFormulas
    // min_int = 0, max_int = 0 for signed narrow 1 bit: everything quantizes to the zero point.
    const at::Tensor x = at::randn({50}), s = at::full({}, 0.3), z = at::zeros({}), b = at::ones({});
    const Config cfg{true, true};
    EXPECT_TRUE(bitwise_equal(run(x, s, z, b, cfg), ref_int_quant(x, s, z, b, cfg, false)));
  }
}

TEST(IntQuant, NaNPropagates) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x = test::values({test::nan(), 1.0, -test::nan(), 1e9}, dtype);
    for (const auto& mode : modes()) {
      for (const bool clamp_ste : {false, true}) {
        const Config cfg{true, false, mode, clamp_ste};
        const at::Tensor y =
            run(x, at::full({}, 0.1, opts(dtype)), at::full({}, 2., opts(dtype)), at::full({}, 8.), cfg);
        EXPECT_TRUE(at::isnan(y[0]).item<bool>()) << dtype << " " << mode;
        EXPECT_TRUE(at::isnan(y[2]).item<bool>()) << dtype << " " << mode;
        EXPECT_FALSE(at::isnan(y[1]).item<bool>()) << dtype << " " << mode;
      }
    }
    // The mask of _int_quant_with_mask lets NaN through (neither above nor below the range).
    auto [y, mask] = ops::_int_quant_with_mask(x, at::ones({}, opts(dtype)), at::zeros({}, opts(dtype)),
                                               at::full({}, 8.), true, false, "round");
    EXPECT_TRUE(bitwise_equal(mask, at::tensor({1, 1, 1, 0}).to(at::kBool)));
  }
}

TEST(IntQuant, PerChannelScaleAndZeroPointOnEveryLayout) {
  const at::Tensor x = at::randn({4, 3, 5, 2}, opts(at::kDouble)).mul(4).to(at::kFloat);
  const at::Tensor s0 = at::rand({4, 1, 1, 1}).add(0.05), z0 = at::randint(-3, 4, {4, 1, 1, 1}).to(at::kFloat);
  const at::Tensor s1 = at::rand({1, 3, 1, 1}).add(0.05), z1 = at::randint(-3, 4, {1, 3, 1, 1}).to(at::kFloat);
  const at::Tensor s3 = at::rand({2}).add(0.05), z3 = at::rand({2});  // last dim, non-integer zero point
  const at::Tensor s12 = at::rand({3, 5, 1}).add(0.05);               // two middle dims
  const at::Tensor b = at::full({}, 4.);
  const std::vector<at::Tensor> layouts{x, x.contiguous(at::MemoryFormat::ChannelsLast),
                                        x.permute({3, 1, 2, 0}).contiguous().permute({3, 1, 2, 0}),
                                        x.transpose(0, 1).contiguous().transpose(0, 1)};
  const std::vector<std::pair<at::Tensor, at::Tensor>> params{
      {s0, z0}, {s1, z1}, {s3, z3}, {s12, at::zeros({})}, {s0, z1}, {at::full({}, 0.2), z0}};
  for (const auto dtype : test::float_dtypes()) {
    for (const auto& x_float : layouts) {
      const at::Tensor xx = x_float.to(dtype);  // keeps the strides
      for (const auto& [s_float, z_float] : params) {
        const at::Tensor s = s_float.to(dtype), z = z_float.to(dtype);
        for (const auto& mode : {"round", "dpu"}) {
          for (const auto& cfg : sign_narrow_configs(mode)) {
            const at::Tensor y = run(xx, s, z, b, cfg);
            EXPECT_EQ(y.strides(), xx.strides()) << "output keeps x's layout";
            EXPECT_TRUE(bitwise_equal(y, ref_int_quant(xx, s, z, b, cfg, false)))
                << dtype << " x strides " << xx.strides() << " scale " << s.sizes() << " zp " << z.sizes();
          }
        }
      }
    }
  }
}

TEST(IntQuant, PerGroupViewAndNonDenseInput) {
  // Groups of 4 along the last dim: x [8, 12] viewed as [8, 3, 4], scale [8, 3, 1].
  const at::Tensor x = at::randn({8, 12}) * 3;
  const at::Tensor xg = x.view({8, 3, 4});
  const at::Tensor s = at::rand({8, 3, 1}).add(0.05), z = at::zeros({8, 3, 1});
  const Config cfg{true, false};
  const at::Tensor b = at::full({}, 4.);
  EXPECT_TRUE(bitwise_equal(run(xg, s, z, b, cfg).view({8, 12}), ref_int_quant(xg, s, z, b, cfg, false).view({8, 12})));
  {  // NonDenseInput
    const at::Tensor base = at::randn({6, 10}) * 3;
    const at::Tensor x = base.slice(1, 0, 10, 3);  // strided, not dense
    const at::Tensor s = at::rand({6, 1}).add(0.1), z = at::zeros({});
    const Config cfg{false, false, "floor"};
    EXPECT_TRUE(bitwise_equal(run(x, s, z, at::full({}, 3), cfg), ref_int_quant(x, s, z, at::full({}, 3), cfg, false)));
  }
}

TEST(IntQuant, BitWidthDtypes) {
  const at::Tensor x = at::randn({64}) * 100, s = at::full({}, 0.7), z = at::zeros({});
  for (const auto bdtype :
       {at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}) {
    for (const auto& cfg : sign_narrow_configs()) {
      const at::Tensor b = at::full({1}, 7, opts(bdtype));
      EXPECT_TRUE(bitwise_equal(run(x, s, z, b, cfg), ref_int_quant(x, s, z, b, cfg, false))) << bdtype;
    }
  }
  {  // Float16BoundsPassThroughBitWidthDtype
    // 16-bit unsigned: max_int = 65535 in float32 bit_width, cast to half -> inf; bfloat16 rounds it.
    for (const auto dtype : {at::kHalf, at::kBFloat16}) {
      const at::Tensor x = test::values({70000., 65504., 65535., 1e4, -3., 40000.}, at::kFloat).to(dtype);
      for (const auto bdtype : {at::kFloat, at::kLong, at::kHalf}) {
        for (const int64_t bits : {12, 16}) {
          for (const auto& cfg : sign_narrow_configs()) {
            const at::Tensor b = at::full({}, bits, opts(bdtype));
            const at::Tensor s = at::ones({}, opts(dtype)), z = at::zeros({}, opts(dtype));
            EXPECT_TRUE(bitwise_equal(run(x, s, z, b, cfg), ref_int_quant(x, s, z, b, cfg, false)))
                << dtype << " " << bdtype << " " << bits;
          }
        }
      }
    }
  }
}

TEST(IntQuant, WithMaskOpReturnsForwardAndPassMask) {
  const at::Tensor x = tie_input(at::kFloat).contiguous();
  const at::Tensor s = at::full({}, 0.5), z = at::full({}, 1.);
  for (const auto& mode : modes()) {
    for (const auto& cfg : sign_narrow_configs(mode)) {
      const at::Tensor b = at::full({}, 4);
      auto [y, mask] = ops::_int_quant_with_mask(x, s, z, b, cfg.is_signed, cfg.narrow, mode);
      EXPECT_TRUE(bitwise_equal(y, ref_int_quant(x, s, z, b, cfg, false))) << mode;
      const at::Tensor r = ref_round_mode(x / s + z, mode);
      const at::Tensor hi = ref_max_int(b, cfg.is_signed, cfg.narrow).type_as(x);
      const at::Tensor lo = ref_min_int(b, cfg.is_signed, cfg.narrow).type_as(x);
      const at::Tensor c1 = at::where(r > hi, hi, r);
      EXPECT_EQ(mask.scalar_type(), at::kBool);
      EXPECT_TRUE(at::equal(mask, at::logical_not((r > hi) | (c1 < lo)))) << mode;
    }
  }
}

TEST(IntQuant, EmptyInputAndMetaKernel) {
  const at::Tensor x = at::empty({0, 3});
  const at::Tensor y = ops::int_quant(x, at::ones({3}), at::zeros({3}), at::full({}, 8.), true, false, "round", false);
  EXPECT_EQ(y.sizes(), x.sizes());
  at::Tensor xg = test::leaf(x), s = test::leaf(at::ones({3})), z = test::leaf(at::zeros({1, 3}));
  at::Tensor b = test::leaf(at::full({1}, 8.));
  const auto gr =
      test::grads(ops::int_quant(xg, s, z, b, true, false, "round", false), {xg, s, z, b}, at::empty({0, 3}));
  EXPECT_TRUE(bitwise_equal(gr[0], at::zeros({0, 3})));
  EXPECT_TRUE(bitwise_equal(gr[1], at::zeros({3})));
  EXPECT_TRUE(bitwise_equal(gr[2], at::zeros({1, 3})));
  EXPECT_TRUE(bitwise_equal(gr[3], at::zeros({1})));
  {  // MetaKernel
    const auto meta = at::TensorOptions().device(at::kMeta);
    const at::Tensor x = at::empty({2, 3, 4, 5}, meta).contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor y = ops::int_quant(x, at::empty({1, 3, 1, 1}, meta), at::empty({}, meta), at::empty({}, meta),
                                        true, false, "round", false);
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_EQ(y.strides(), x.strides());
    auto [ym, mask] = ops::_int_quant_with_mask(x, at::empty({}, meta), at::empty({}, meta), at::empty({1}, meta),
                                                false, false, "floor");
    EXPECT_EQ(mask.scalar_type(), at::kBool);
    EXPECT_EQ(mask.strides(), x.strides());
    auto [gx, gs, gz, gb] = ops::_int_quant_backward(
        at::empty({2, 3, 4, 5}, meta), x, std::nullopt, at::empty({1, 3, 1, 1}, meta), at::empty({}, meta),
        at::empty({}, meta), true, false, "round", false, {true, true, true, false});
    EXPECT_TRUE(gx.is_meta());
    EXPECT_EQ(gx.sizes(), x.sizes());
    EXPECT_EQ(gs.sizes(), (std::vector<int64_t>{1, 3, 1, 1}));
    EXPECT_EQ(gz.dim(), 0);
    EXPECT_FALSE(gb.defined());
    // Shape checks run on meta tensors too.
    EXPECT_ERROR_CONTAINS(
        ops::int_quant(x, at::empty({7}, meta), at::empty({}, meta), at::empty({}, meta), true, false, "round", false),
        "scale of shape [7] does not broadcast");
  }
}

// ---------------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------------

struct GradCase {
  at::Tensor x, s, z, b;
  bool x_grad, s_grad, z_grad, b_grad;
};

// Runs ours and the STE composition and compares every gradient.
void expect_grads_match(const GradCase& gc, const Config& cfg, const std::string& what) {
  const at::Tensor g = at::randn(gc.x.sizes(), opts(at::kDouble)).to(gc.x.scalar_type());
  auto make = [&](const at::Tensor& t, bool rg) { return test::leaf(t, rg); };
  at::Tensor x = make(gc.x, gc.x_grad), s = make(gc.s, gc.s_grad), z = make(gc.z, gc.z_grad), b = make(gc.b, gc.b_grad);
  at::Tensor xr = make(gc.x, gc.x_grad), sr = make(gc.s, gc.s_grad), zr = make(gc.z, gc.z_grad),
             br = make(gc.b, gc.b_grad);
  const at::Tensor y = run(x, s, z, b, cfg);
  const at::Tensor yr = ref_int_quant(xr, sr, zr, br, cfg, true);
  EXPECT_TRUE(bitwise_equal(y.detach(), ref_int_quant(gc.x, gc.s, gc.z, gc.b, cfg, false))) << what;
  std::vector<at::Tensor> in, in_r;
  std::vector<std::string> names;
  if (gc.x_grad) in.push_back(x), in_r.push_back(xr), names.push_back("x");
  if (gc.s_grad) in.push_back(s), in_r.push_back(sr), names.push_back("scale");
  if (gc.z_grad) in.push_back(z), in_r.push_back(zr), names.push_back("zero_point");
  if (gc.b_grad) in.push_back(b), in_r.push_back(br), names.push_back("bit_width");
  ASSERT_TRUE(y.requires_grad()) << what;
  if (!yr.requires_grad()) {
    // Only bit_width requires grad and the clamp is straight-through: the composition has no
    // path to it, ours gives no gradient either.
    for (const auto& t : test::grads(y, in, g)) EXPECT_FALSE(t.defined()) << what;
    return;
  }
  const auto got = test::grads(y, in, g);
  const auto want = test::grads(yr, in_r, g);
  const double rtol = test::grad_rtol(gc.x.scalar_type());
  for (size_t i = 0; i < in.size(); ++i) {
    if (names[i] == "x") {
      EXPECT_TRUE(bitwise_equal(got[i], want[i])) << what << ": grad of x";
    } else if (names[i] == "bit_width" && cfg.clamp_ste) {
      EXPECT_FALSE(got[i].defined()) << what << ": bit_width.grad must stay None with clamp_ste";
      EXPECT_FALSE(want[i].defined());
    } else {
      // atol: the sums cancel; scale it by the magnitude of the terms.
      // Parameter gradients come in the parameter's dtype (bit_width may be float32 with a
      // float64 x); atol: the sums cancel, so scale it by the magnitude of the terms.
      const double prtol = std::max(rtol, test::grad_rtol(got[i].scalar_type()));
      const double atol = prtol * (g.abs().sum().item<double>() + 1.0) * 10;
      EXPECT_TRUE(test::close(got[i], want[i], prtol, atol)) << what << ": grad of " << names[i];
    }
  }
}

TEST(IntQuant, BackwardOnlyXBitwiseEqualsComposition) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    // Ties and clamp edges; no infinities (see BackwardAtInfinity) and no NaN.
    const at::Tensor x = tie_input(dtype, /*with_non_finite=*/false);
    for (const auto& mode : modes()) {
      for (const bool clamp_ste : {false, true}) {
        for (auto cfg : sign_narrow_configs(mode)) {
          cfg.clamp_ste = clamp_ste;
          GradCase gc{
              x,    at::full({}, 0.5, opts(dtype)), at::full({}, 1., opts(dtype)), at::full({}, 4.), true, false, false,
              false};
          expect_grads_match(gc, cfg, std::string("only x, ") + mode + (clamp_ste ? " clamp_ste" : ""));
        }
      }
    }
  }
}

TEST(IntQuant, BackwardAtInfinity) {
  // x = +-inf: round(u) = +-inf is beyond the range, so the clamp masks the gradient, as with
  // Brevitas's round_ste (an autograd Function: round forward, identity backward). The literal
  // additive STE u + (round(u) - u).detach() would be NaN there (inf - inf) and let the gradient
  // through; that form only defines the gradient for finite u.
  const at::Tensor x0 = test::values({test::inf(), -test::inf(), 1.0});
  const at::Tensor g = test::values({2., 3., 4.});
  for (const bool clamp_ste : {false, true}) {
    at::Tensor x = test::leaf(x0);
    const at::Tensor s = at::full({}, 0.5);
    const at::Tensor y = ops::int_quant(x, s, at::zeros({}), at::full({}, 8.), true, false, "round", clamp_ste);
    EXPECT_TRUE(bitwise_equal(y.detach(), test::values({63.5, -64., 1.})));
    const at::Tensor gx = test::grads(y, {x}, g)[0];
    // Masked by the clamp; straight through (g * s / s) with clamp_ste.
    EXPECT_TRUE(bitwise_equal(gx, clamp_ste ? g : test::values({0., 0., 4.}))) << clamp_ste;
  }
  // Same with a learned scale (x saved instead of the mask), both gradients requested.
  at::Tensor x = test::leaf(x0), s = test::leaf(at::full({}, 0.5));
  const at::Tensor y = ops::int_quant(x, s, at::zeros({}), at::full({}, 8.), true, false, "round", false);
  EXPECT_TRUE(bitwise_equal(test::grads(y, {x, s}, g)[0], test::values({0., 0., 4.})));
}

// Regression (fixed in 2cd9cba): with scale (or zero_point) requiring grad the forward saves x
// and no mask; backward asked for x's gradient only (output_mask {true, false, false, false})
// used to ignore x and return g * s / s unmasked, so clamped elements got g instead of 0.
TEST(IntQuant, BackwardOnlyXWhileParamsRequireGrad) {
  const at::Tensor x0 = test::values({1000., -1000., 1., 127.75, -128.75});
  const at::Tensor g = test::values({2., 3., 4., 5., 6.});
  const at::Tensor expected = test::values({0., 0., 4., 0., 0.});
  for (const bool scale_grad : {true, false}) {
    at::Tensor x = test::leaf(x0), s = test::leaf(at::ones({}), scale_grad), z = test::leaf(at::zeros({}), !scale_grad);
    const at::Tensor y = ops::int_quant(x, s, z, at::full({}, 8.), true, false, "round", false);
    EXPECT_TRUE(bitwise_equal(test::grads(y, {x}, g)[0], expected))
        << (scale_grad ? "scale" : "zero_point") << " requires grad";
  }
}

// Regression (same root): _int_quant_backward given x but no mask must mask x's gradient.
TEST(IntQuant, BackwardOpWithXAndNoMaskMasksGradient) {
  const at::Tensor x = test::values({1000., -1000., 1.});
  const at::Tensor s = at::full({}, 0.5), z = at::zeros({}), b = at::full({}, 8.), g = at::ones({3});
  auto [gx, gs, gz, gb] =
      ops::_int_quant_backward(g, x, std::nullopt, s, z, b, true, false, "round", false, {true, false, false, false});
  EXPECT_TRUE(bitwise_equal(gx, test::values({0., 0., 1.})));
}

TEST(IntQuant, BackwardAllInputsPerTensor) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    // Random x (no exact ties after x / s for a random scale): every mode, both clamps.
    const at::Tensor x = at::randn({7, 33}, opts(at::kDouble)).mul(3).to(dtype);
    for (const auto& mode : modes()) {
      for (const bool clamp_ste : {false, true}) {
        for (auto cfg : sign_narrow_configs(mode)) {
          cfg.clamp_ste = clamp_ste;
          GradCase gc{x,
                      at::full({}, 0.37, opts(dtype)),
                      at::full({}, 0.6, opts(dtype)),
                      at::full({}, 3., opts(dtype)),
                      true,
                      true,
                      true,
                      true};
          expect_grads_match(gc, cfg, std::string("all, per tensor, ") + mode + (clamp_ste ? " clamp_ste" : ""));
        }
      }
    }
  }
}

TEST(IntQuant, BackwardSubsetsOfInputs) {
  const at::Tensor x = at::randn({5, 9}) * 3;
  const at::Tensor s = at::rand({5, 1}).add(0.2), z = at::full({}, 2.), b = at::full({1}, 3.);
  for (int m = 1; m < 16; ++m) {
    for (const bool clamp_ste : {false, true}) {
      Config cfg{true, false, "round", clamp_ste};
      GradCase gc{x, s, z, b, bool(m & 1), bool(m & 2), bool(m & 4), bool(m & 8)};
      expect_grads_match(gc, cfg, "subset " + std::to_string(m) + (clamp_ste ? " clamp_ste" : ""));
    }
  }
}

TEST(IntQuant, BackwardPerChannelScaleAndLayouts) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor x = at::randn({6, 4, 3, 3}, opts(at::kDouble)).mul(2).to(dtype);
    const at::Tensor s0 = at::rand({6, 1, 1, 1}, opts(at::kDouble)).add(0.05).to(dtype);
    const at::Tensor s1 = at::rand({1, 4, 1, 1}, opts(at::kDouble)).add(0.05).to(dtype);
    const at::Tensor z0 = at::randint(-2, 3, {6, 1, 1, 1}, opts(dtype));
    const at::Tensor z1 = at::rand({1, 4, 1, 1}, opts(dtype));
    for (const auto& xx :
         {x, x.contiguous(at::MemoryFormat::ChannelsLast), x.transpose(0, 1).contiguous().transpose(0, 1)}) {
      for (const auto& [s, z] : {std::pair{s0, z0}, std::pair{s1, z1}, std::pair{s0, z1}}) {
        for (const bool clamp_ste : {false, true}) {
          Config cfg{true, true, "round", clamp_ste};
          GradCase gc{xx, s, z, at::full({}, 3., opts(at::kFloat)), true, true, true, true};
          expect_grads_match(gc, cfg,
                             "per channel, scale " + c10::str(s.sizes()) + " strides " + c10::str(xx.strides()));
        }
      }
    }
  }
}

TEST(IntQuant, BackwardExpandedParameters) {
  // Parameters passed as expanded views (stride 0 along the channel dim): their gradients keep
  // the parameter's shape and autograd sums them back to the leaf.
  const at::Tensor x0 = at::randn({4, 3, 2, 2}) * 3;
  const at::Tensor g = at::randn({4, 3, 2, 2});
  at::Tensor s_leaf = test::leaf(at::full({1, 1, 1, 1}, 0.4)), z_leaf = test::leaf(at::full({1, 1, 1}, 1.0));
  at::Tensor sr_leaf = test::leaf(at::full({1, 1, 1, 1}, 0.4)), zr_leaf = test::leaf(at::full({1, 1, 1}, 1.0));
  at::Tensor x = test::leaf(x0), xr = test::leaf(x0);
  const at::Tensor s = s_leaf.expand({4, 1, 1, 1}), z = z_leaf.expand({3, 1, 1});
  const at::Tensor sr = sr_leaf.expand({4, 1, 1, 1}), zr = zr_leaf.expand({3, 1, 1});
  ASSERT_EQ(s.stride(0), 0);
  const at::Tensor b = at::full({}, 4.);
  const Config cfg{true, false, "round", false};
  const at::Tensor y = run(x, s, z, b, cfg);
  EXPECT_TRUE(bitwise_equal(y.detach(), ref_int_quant(x0, s.detach(), z.detach(), b, cfg, false)));
  const auto got = test::grads(y, {x, s_leaf, z_leaf}, g);
  const auto want = test::grads(ref_int_quant(xr, sr, zr, b, cfg, true), {xr, sr_leaf, zr_leaf}, g);
  EXPECT_TRUE(bitwise_equal(got[0], want[0]));
  EXPECT_TRUE(test::close(got[1], want[1], 1e-5, 1e-5));
  EXPECT_TRUE(test::close(got[2], want[2], 1e-5, 1e-5));
  // The backward op directly: the scale gradient has the expanded parameter's shape.
  auto [gx, gs, gz, gb] = ops::_int_quant_backward(g, x0, std::nullopt, s.detach(), z.detach(), b, true, false, "round",
                                                   false, {false, true, true, false});
  EXPECT_EQ(gs.sizes(), (std::vector<int64_t>{4, 1, 1, 1}));
  EXPECT_EQ(gz.sizes(), (std::vector<int64_t>{3, 1, 1}));
}

TEST(IntQuant, BackwardNonDenseStridedAndZeroDim) {
  // x a strided view of a leaf; scale a non-contiguous view; zero point per channel.
  const at::Tensor base0 = at::randn({6, 10}) * 3;
  const at::Tensor sbase = at::rand({6, 2}).add(0.1);
  const at::Tensor z = at::randint(-2, 3, {6, 1}).to(at::kFloat);
  const at::Tensor g = at::randn({6, 4});
  for (const bool learn : {false, true}) {
    at::Tensor base = test::leaf(base0), sb = test::leaf(sbase, learn);
    at::Tensor base_r = test::leaf(base0), sb_r = test::leaf(sbase, learn);
    const at::Tensor x = base.slice(1, 0, 8, 2), xr = base_r.slice(1, 0, 8, 2);              // [6, 4], stride 2
    const at::Tensor s = sb.select(1, 1).unsqueeze(1), sr = sb_r.select(1, 1).unsqueeze(1);  // [6, 1], stride 2
    ASSERT_FALSE(s.is_contiguous() && s.stride(0) == 1);
    const Config cfg{true, false, "round", false};
    const at::Tensor b = at::full({}, 3.);
    const at::Tensor y = run(x, s, z, b, cfg);
    EXPECT_TRUE(bitwise_equal(y.detach(), ref_int_quant(x.detach(), s.detach(), z, b, cfg, false)));
    std::vector<at::Tensor> in{base}, in_r{base_r};
    if (learn) in.push_back(sb), in_r.push_back(sb_r);
    const auto got = test::grads(y, in, g);
    const auto want = test::grads(ref_int_quant(xr, sr, z, b, cfg, true), in_r, g);
    EXPECT_TRUE(bitwise_equal(got[0], want[0])) << learn;
    if (learn) EXPECT_TRUE(test::close(got[1], want[1], 1e-5, 1e-5));
  }
  {  // ZeroDimInput
    at::Tensor x = test::leaf(at::full({}, 2.6)), s = test::leaf(at::full({}, 0.5));
    const Config cfg{false, false, "floor"};
    const at::Tensor y = run(x, s, at::zeros({}), at::full({}, 4.), cfg);
    EXPECT_EQ(y.dim(), 0);
    EXPECT_TRUE(bitwise_equal(y.detach(), at::full({}, 2.5)));
    const auto gr = test::grads(y, {x, s}, at::ones({}));
    EXPECT_TRUE(bitwise_equal(gr[0], at::ones({})));
    // ds as the composition computes it.
    at::Tensor xr = test::leaf(at::full({}, 2.6)), sr = test::leaf(at::full({}, 0.5));
    const auto want =
        test::grads(ref_int_quant(xr, sr, at::zeros({}), at::full({}, 4.), cfg, true), {xr, sr}, at::ones({}));
    EXPECT_TRUE(test::close(gr[1], want[1], 1e-5, 1e-6));
    // A [1] scale would expand a 0-d x: rejected.
    EXPECT_ERROR_CONTAINS(run(x, at::full({1}, 0.5), at::zeros({}), at::full({}, 4.), cfg), "scale of shape [1]");
  }
}

TEST(IntQuant, BackwardLayoutAndLowPrecision) {
  const at::Tensor x0 = (at::randn({2, 3, 4, 5}) * 3).contiguous(at::MemoryFormat::ChannelsLast);
  for (const bool learn_scale : {false, true}) {
    at::Tensor x = test::leaf(x0), s = test::leaf(at::rand({1, 3, 1, 1}).add(0.1), learn_scale);
    const at::Tensor y = ops::int_quant(x, s, at::zeros({}), at::full({}, 4.), true, false, "round", false);
    const auto gx = torch::autograd::grad({y}, {x}, {at::ones_like(y)})[0];
    EXPECT_EQ(gx.strides(), x0.strides()) << learn_scale;
  }
  {  // BackwardLowPrecisionMatchesCompositionInThatDtype
    for (const auto dtype : {at::kHalf, at::kBFloat16}) {
      const at::Tensor x = at::randn({200}, opts(at::kDouble)).mul(3).to(dtype);
      for (const bool clamp_ste : {false, true}) {
        Config cfg{true, false, "round", clamp_ste};
        const at::Tensor g = at::randn({200}, opts(at::kDouble)).to(dtype);
        at::Tensor xa = test::leaf(x), xr = test::leaf(x);
        const at::Tensor s = at::full({}, 0.3, opts(dtype)), z = at::zeros({}, opts(dtype)), b = at::full({}, 4.);
        EXPECT_TRUE(bitwise_equal(run(x, s, z, b, cfg), ref_int_quant(x, s, z, b, cfg, false))) << dtype;
        const auto got = test::grads(run(xa, s, z, b, cfg), {xa}, g)[0];
        const auto want = test::grads(ref_int_quant(xr, s, z, b, cfg, true), {xr}, g)[0];
        EXPECT_TRUE(bitwise_equal(got, want)) << dtype << " clamp_ste " << clamp_ste;
      }
    }
  }
}

TEST(IntQuant, BackwardOpDirectly) {
  const at::Tensor x = at::randn({4, 6}) * 4;
  const at::Tensor s = at::full({4, 1}, 0.5), z = at::zeros({}), b = at::full({}, 3.);
  const at::Tensor g = at::randn({4, 6});
  auto [y, mask] = ops::_int_quant_with_mask(x, s, z, b, true, false, "round");
  // Only x's gradient, from the mask alone: g * s / s where the clamp passes.
  auto [gx, gs, gz, gb] = ops::_int_quant_backward(g, std::nullopt, mask, s, z, b, true, false, "round", false,
                                                   {true, false, false, false});
  EXPECT_TRUE(bitwise_equal(gx, at::where(mask, (g * s) / s, at::zeros({}))));
  EXPECT_FALSE(gs.defined());
  EXPECT_FALSE(gz.defined());
  EXPECT_FALSE(gb.defined());
  // clamp_ste: needs neither x nor the mask.
  auto [gx2, gs2, gz2, gb2] = ops::_int_quant_backward(g, std::nullopt, std::nullopt, s, z, b, true, false, "round",
                                                       true, {true, false, false, false});
  EXPECT_TRUE(bitwise_equal(gx2, (g * s) / s));
  // From x instead of the mask: the same gradient.
  auto [gx3, gs3, gz3, gb3] =
      ops::_int_quant_backward(g, x, std::nullopt, s, z, b, true, false, "round", false, {true, true, true, true});
  EXPECT_TRUE(bitwise_equal(gx3, gx));
  EXPECT_EQ(gs3.sizes(), s.sizes());
  EXPECT_EQ(gz3.sizes(), z.sizes());
  EXPECT_EQ(gb3.sizes(), b.sizes());
  // Parameter gradients need x.
  EXPECT_ERROR_CONTAINS(
      ops::_int_quant_backward(g, std::nullopt, mask, s, z, b, true, false, "round", false, {true, true, false, false}),
      "brevitas_cpp::_int_quant_backward", "need x");
  EXPECT_ERROR_CONTAINS(ops::_int_quant_backward(g, std::nullopt, std::nullopt, s, z, b, true, false, "round", false,
                                                 {true, false, false, false}),
                        "x or mask");
}

TEST(IntQuant, NotDifferentiableTwiceAndInferenceBuildsNoGraph) {
  at::Tensor x = test::leaf(at::randn({8}) * 3);
  const at::Tensor s = at::full({}, 0.5), z = at::zeros({}), b = at::full({}, 4.);
  at::Tensor g = test::leaf(at::randn({8}));
  const at::Tensor y = ops::int_quant(x, s, z, b, true, false, "round", false);
  const auto gx = torch::autograd::grad({y}, {x}, {g}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  ASSERT_TRUE(gx.requires_grad());
  EXPECT_ERROR_CONTAINS(gx.sum().backward(), "_int_quant_backward");
  auto [ym, mask] = ops::_int_quant_with_mask(x, s, z, b, true, false, "round");
  EXPECT_ERROR_CONTAINS(ym.sum().backward(), "_int_quant_with_mask");
  {  // InferenceBuildsNoGraph
    at::Tensor x = test::leaf(at::randn({8})), s = test::leaf(at::full({}, 0.5));
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(ops::int_quant(x, s, at::zeros({}), at::full({}, 4.), true, false, "round", false).requires_grad());
  }
}

// ---------------------------------------------------------------------------------------------
// Bad inputs: c10::Error naming the op, the argument and the value
// ---------------------------------------------------------------------------------------------

TEST(IntQuant, BadInputsNameTheArgument) {
  const at::Tensor x = at::randn({2, 5}), s = at::full({}, 0.5), z = at::zeros({}), b = at::full({}, 8.);
  auto q = [&](const at::Tensor& xx, const at::Tensor& ss, const at::Tensor& zz, const at::Tensor& bb,
               const std::string& mode = "round") { return ops::int_quant(xx, ss, zz, bb, true, false, mode, false); };
  const std::string normal = "scale must be a normal positive finite number (>= 1.17549e-38 for float32), got ";
  EXPECT_ERROR_CONTAINS(q(x, at::zeros({}), z, b), "brevitas_cpp::int_quant", normal + "0");
  EXPECT_ERROR_CONTAINS(q(x, at::full({2, 1}, -1.), z, b), normal + "-1");
  EXPECT_ERROR_CONTAINS(q(x, at::full({}, test::inf()), z, b), normal + "inf");
  EXPECT_ERROR_CONTAINS(q(x, at::full({}, test::nan()), z, b), normal + "nan");
  // Subnormal scales: x / s and the scale's gradient would overflow (float16's bound is 2^-14).
  EXPECT_ERROR_CONTAINS(q(x, at::full({}, 1e-40), z, b), normal + "9.99995e-41");
  EXPECT_ERROR_CONTAINS(q(x.to(at::kHalf), at::full({}, 1e-5, at::kHalf), z.to(at::kHalf), b),
                        "scale must be a normal positive finite number (>= 6.10352e-05 for float16), got 1.00136e-05");
  EXPECT_ERROR_CONTAINS(ops::_int_quant_backward(x, x, std::nullopt, at::full({}, 1e-40), z, b, true, false, "round",
                                                 false, {true, true, true, true}),
                        "brevitas_cpp::_int_quant_backward", normal);
  EXPECT_ERROR_CONTAINS(q(x, s, at::full({}, test::inf()), b), "zero_point must be finite, got inf");
  EXPECT_ERROR_CONTAINS(q(x, s, z, at::full({}, 33.)), "bit_width must be an integer in [1, 32], got 33");
  EXPECT_ERROR_CONTAINS(q(x, s, z, at::full({}, 0)), "bit_width must be an integer in [1, 32], got 0");
  EXPECT_ERROR_CONTAINS(q(x, s, z, at::full({}, 2.5)), "bit_width must be an integer in [1, 32], got 2.5");
  EXPECT_ERROR_CONTAINS(q(x, s, z, at::full({2}, 8.)), "bit_width must hold exactly one value", "[2]");
  EXPECT_ERROR_CONTAINS(q(x, s, z, at::ones({}, at::kBool)), "bit_width");
  EXPECT_ERROR_CONTAINS(q(x, at::full({3}, 0.5), z, b), "scale of shape [3] does not broadcast to x of shape [2, 5]");
  EXPECT_ERROR_CONTAINS(q(x, s, at::zeros({3, 2, 5}), b), "zero_point of shape [3, 2, 5] does not broadcast");
  EXPECT_ERROR_CONTAINS(q(x, s.to(at::kDouble), z, b), "scale must have the dtype of x");
  EXPECT_ERROR_CONTAINS(q(x, s, z.to(at::kHalf), b), "zero_point must have the dtype of x");
  EXPECT_ERROR_CONTAINS(q(x, s, z, b, "foo"), "rounding_mode 'foo' is unknown; accepted", "round_to_zero", "dpu");
  EXPECT_ERROR_CONTAINS(q(at::arange(10).view({2, 5}), s, z, b), "x must be a floating-point tensor");
  // A scale on another device (meta) with a CPU x.
  EXPECT_THROW(q(x, at::full({}, 0.5, at::TensorOptions().device(at::kMeta)), z, b), c10::Error);
  // Errors also come through the autograd kernel.
  at::Tensor xg = test::leaf(x);
  EXPECT_ERROR_CONTAINS(q(xg, at::zeros({}), z, b), "scale must be a normal positive finite number");
  // And the with-mask op checks the same.
  EXPECT_ERROR_CONTAINS(ops::_int_quant_with_mask(x, s, z, at::full({}, 40.), true, false, "round"),
                        "brevitas_cpp::", "bit_width must be an integer in [1, 32], got 40");
}

}  // namespace
}  // namespace brevitas_cpp
