#include "ops/autograd/ste_function.h"
#include "ops/round_ste.h"

#include <torch/library.h>

namespace brevitas_cpp::autograd {

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("round_ste", TORCH_FN((ste_autograd<ops::round_ste>)));
  m.impl("ceil_ste", TORCH_FN((ste_autograd<ops::ceil_ste>)));
  m.impl("floor_ste", TORCH_FN((ste_autograd<ops::floor_ste>)));
  m.impl("round_to_zero_ste", TORCH_FN((ste_autograd<ops::round_to_zero_ste>)));
  m.impl("dpu_round_ste", TORCH_FN((ste_autograd<ops::dpu_round_ste>)));
}

}  // namespace brevitas_cpp::autograd
