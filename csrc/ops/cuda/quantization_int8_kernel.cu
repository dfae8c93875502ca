// quantization_int8 on CUDA: the statistics through the shared ATen driver (one host read of
// the counter per call), then one elementwise pass; the "clip" gradient in one pass.
#include "ops/common/int8_threshold.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/quantization_int8.h"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

template <typename T>
struct SymmetricQuantMap {
  const T* x;
  T* y;
  const T* s;
  ParamIndex pi;
  T quant_max;
  using State = NoState;
  struct Loaded {
    T x, s;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {x[idx], s[pi(idx)]}; }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const {
    y[idx] = scalar_math::symmetric_quant(v.x, v.s, quant_max);
  }
};

template <typename T>
struct ClipWindowMap {
  const T* g;
  const T* x;
  T* gx;
  const T* t;
  ParamIndex pi;
  using State = NoState;
  struct Loaded {
    T g, x, t;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {g[idx], x[idx], t[pi(idx)]}; }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const {
    gx[idx] = scalar_math::clip_window_grad(v.g, v.x, v.t);
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8_cuda(
    const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration, int64_t nbits, bool is_weight,
    std::optional<int64_t> channel_axis, double ema_decay, int64_t delay_quant, c10::string_view grad_mode,
    c10::string_view quant_mode, bool training) {
  const auto args = ops::detail::check_quantization_int8_args(x, threshold, iteration, nbits, channel_axis, ema_decay,
                                                              delay_quant, grad_mode, quant_mode);
  const c10::cuda::CUDAGuard guard(x.device());
  auto p =
      ops::detail::update_int8_threshold(x, threshold, iteration, args, is_weight, ema_decay, delay_quant, training);
  at::Tensor y = empty_output_like(x);
  if (x.numel() == 0) return {y, p.scale, p.clip_threshold};
  if (!p.quantize) {
    y.copy_(x);
    return {y, p.scale, p.clip_threshold};
  }
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {p.scale}, x.scalar_type(), /*fold_short_runs=*/false);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "quantization_int8_cuda", [&] {
    launch_map(x.numel(), SymmetricQuantMap<scalar_t>{xd.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(),
                                                      L.params[0].const_data_ptr<scalar_t>(), ParamIndex(L),
                                                      static_cast<scalar_t>(args.quant_max)});
  });
  return {y, p.scale, p.clip_threshold};
}

at::Tensor quantization_int8_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                           const at::Tensor& clip_threshold) {
  ops::detail::check_quantization_int8_backward_args(grad, x, clip_threshold);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor gx = empty_output_like(x);
  if (x.numel() == 0) return gx;
  const at::Tensor gd = with_layout_of(grad, gx);
  const at::Tensor xd = with_layout_of(x, gx);
  const ParamLayout L = make_param_layout(gx, {clip_threshold}, x.scalar_type(), /*fold_short_runs=*/false);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "quantization_int8_backward_cuda", [&] {
    launch_map(x.numel(), ClipWindowMap<scalar_t>{gd.const_data_ptr<scalar_t>(), xd.const_data_ptr<scalar_t>(),
                                                  gx.mutable_data_ptr<scalar_t>(),
                                                  L.params[0].const_data_ptr<scalar_t>(), ParamIndex(L)});
  });
  return gx;
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("quantization_int8", TORCH_FN(quantization_int8_cuda));
  m.impl("_quantization_int8_backward", TORCH_FN(quantization_int8_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
