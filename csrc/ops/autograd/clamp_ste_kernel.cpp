#include "ops/autograd/ste_function.h"
#include "ops/clamp_ste.h"

#include <torch/library.h>

namespace brevitas_cpp::autograd {

// Bounds get no gradient (Brevitas's TensorClampSteFn returns None for them).
TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("tensor_clamp_ste", TORCH_FN((ste_autograd<ops::tensor_clamp_ste, const at::Tensor&, const at::Tensor&>)));
  m.impl("scalar_clamp_ste", TORCH_FN((ste_autograd<ops::scalar_clamp_ste, double, double>)));
  m.impl("scalar_clamp_min_ste", TORCH_FN((ste_autograd<ops::scalar_clamp_min_ste, double>)));
  m.impl("scalar_signed_clamp_min_ste", TORCH_FN((ste_autograd<ops::scalar_signed_clamp_min_ste, double>)));
}

}  // namespace brevitas_cpp::autograd
