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
#ifdef BREVITAS_CPP_WITH_CUDA
  info.cuda = true;
  info.cuda_version = BREVITAS_CPP_CUDA_VERSION;
  info.cuda_arch_list = BREVITAS_CPP_CUDA_ARCH_LIST;
#else
  info.cuda = false;
#endif
  return info;
}

}  // namespace brevitas_cpp
