// brevitas_cpp._C: links the op library (loading it registers every op) and reports how
// it was built. It holds no op code of its own.
#include "build_info.h"

#include <pybind11/pybind11.h>

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "brevitas_cpp native extension: op registrations and build facts";
  m.def("build_info", [] {
    const auto info = brevitas_cpp::build_info();
    py::dict d;
    d["torch_version"] = info.torch_version;
    d["openmp"] = info.openmp;
    d["vector_isa"] = info.vector_isa;
    d["active_isa"] = info.active_isa;
    d["cuda"] = info.cuda;
    d["cuda_version"] = info.cuda_version;
    d["cuda_arch_list"] = info.cuda_arch_list;
    return d;
  });
}
