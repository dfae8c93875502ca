// The statistics half of quantization_int8, shared by its CPU, CUDA and composite kernels:
// the max-abs statistic, its maximum over ranks, the EMA, the counter and the delay, on the
// tensors' own device with ATen ops (the threshold is one value or one per channel).
#pragma once

#include "ops/quantization_int8.h"

#include <ATen/core/Tensor.h>

namespace brevitas_cpp::ops::detail {

struct Int8QuantParams {
  at::Tensor scale;           // t_eff / QL in x's dtype, shaped by int8_param_view_shape
  at::Tensor clip_threshold;  // t_eff in x's dtype (+inf when not quantizing), the same shape
  bool quantize;              // false: the output is a copy of x
};

// Updates threshold and iteration in place when training (see quantization_int8.h) and
// returns what the elementwise kernels need. Reads the counter on the host (one value).
Int8QuantParams update_int8_threshold(const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration,
                                      const Int8OpArgs& args, bool is_weight, double ema_decay, int64_t delay_quant,
                                      bool training);

}  // namespace brevitas_cpp::ops::detail
