#include "build_info.h"

#include "ops/cpu/kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace brevitas_cpp {

BuildInfo build_info() {
  BuildInfo info;
  info.torch_version = BREVITAS_CPP_TORCH_VERSION;
#ifdef _OPENMP
  info.openmp = true;
#else
  info.openmp = false;
#endif
  info.vector_isa = cpu::compiled_isas();
  info.active_isa = cpu::isa_name(cpu::active_isa());
  info.cuda = false;
  return info;
}

}  // namespace brevitas_cpp
