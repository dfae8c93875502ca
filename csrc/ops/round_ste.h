#pragma once

#include <ATen/core/Tensor.h>

namespace brevitas_cpp::ops {

// Straight-through rounding: forward rounds, backward passes the gradient unchanged.
at::Tensor round_ste(const at::Tensor& x);  // half to even, like torch.round
at::Tensor ceil_ste(const at::Tensor& x);
at::Tensor floor_ste(const at::Tensor& x);
at::Tensor round_to_zero_ste(const at::Tensor& x);  // sign(x) * floor(|x|)
at::Tensor dpu_round_ste(const at::Tensor& x);      // round, negative x.5 goes up

}  // namespace brevitas_cpp::ops
