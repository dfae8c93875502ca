#include "build_info.h"

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
  info.vector_isa = "DEFAULT";
  info.active_isa = "DEFAULT";
  info.cuda = false;
  return info;
}

}  // namespace brevitas_cpp
