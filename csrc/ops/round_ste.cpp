#include "ops/round_ste.h"

#include "ops/common/op_handle.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

#define BREVITAS_CPP_UNARY_CALL(name)                                                  \
  at::Tensor name(const at::Tensor& x) {                                               \
    static auto op = op_handle<at::Tensor(const at::Tensor&)>("brevitas_cpp::" #name); \
    return op.call(x);                                                                 \
  }
BREVITAS_CPP_UNARY_CALL(round_ste)
BREVITAS_CPP_UNARY_CALL(ceil_ste)
BREVITAS_CPP_UNARY_CALL(floor_ste)
BREVITAS_CPP_UNARY_CALL(round_to_zero_ste)
BREVITAS_CPP_UNARY_CALL(dpu_round_ste)
#undef BREVITAS_CPP_UNARY_CALL

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("round_ste(Tensor x) -> Tensor");
  m.def("ceil_ste(Tensor x) -> Tensor");
  m.def("floor_ste(Tensor x) -> Tensor");
  m.def("round_to_zero_ste(Tensor x) -> Tensor");
  m.def("dpu_round_ste(Tensor x) -> Tensor");
}

}  // namespace brevitas_cpp::ops
