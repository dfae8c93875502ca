#pragma once

#include <string>

namespace brevitas_cpp {

// Facts about how this op library was built, reported by brevitas_cpp.build_info().
struct BuildInfo {
  std::string torch_version;   // torch the library was compiled against
  bool openmp;                 // at::parallel_for runs in parallel
  std::string vector_isa;      // instruction sets the CPU kernels were compiled for
  std::string active_isa;      // the one in use on this machine
  bool cuda;                   // CUDA kernels compiled in
  std::string cuda_version;    // of the nvcc that compiled them ("" without)
  std::string cuda_arch_list;  // TORCH_CUDA_ARCH_LIST they were compiled for ("" without)
};

BuildInfo build_info();

}  // namespace brevitas_cpp
