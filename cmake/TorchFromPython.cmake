# The torch libraries the extension links, located through the Python interpreter that will
# import us, so headers and libraries match the torch the ops are loaded into.
#
# Why not find_package(Torch): with a CUDA build of torch (every PyPI wheel but the +cpu ones)
# TorchConfig.cmake requires a full CUDA toolkit even for a CPU-only extension, so a plain
# `pip install torch` user without one could not build. The CPU extension needs only c10,
# torch_cpu and torch (as torch.utils.cpp_extension.CppExtension links), and the C++ ABI flag.
#
# Defines the imported target brevitas_cpp::torch and BREVITAS_CPP_TORCH_VERSION,
# BREVITAS_CPP_TORCH_LIB_DIR, BREVITAS_CPP_TORCH_HAS_CUDA, BREVITAS_CPP_CXX_STANDARD.
find_package(Python COMPONENTS Interpreter REQUIRED)
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c
    "import os, torch; v = tuple(int(p) for p in torch.__version__.split('+')[0].split('.')[:2]); print(';'.join([torch.__version__, str(int(torch._C._GLIBCXX_USE_CXX11_ABI)), os.path.dirname(torch.__file__), str(int(torch.version.cuda is not None)), '20' if v >= (2, 13) else '17']))"
  OUTPUT_VARIABLE _brevitas_torch_facts OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _brevitas_torch_rc)
if(NOT _brevitas_torch_rc EQUAL 0)
  message(FATAL_ERROR "brevitas_cpp: 'import torch' failed with ${Python_EXECUTABLE}; install torch first "
                      "and build with 'pip install --no-build-isolation'.")
endif()
list(GET _brevitas_torch_facts 0 BREVITAS_CPP_TORCH_VERSION)
list(GET _brevitas_torch_facts 1 _brevitas_torch_cxx11_abi)
list(GET _brevitas_torch_facts 2 _brevitas_torch_root)
list(GET _brevitas_torch_facts 3 BREVITAS_CPP_TORCH_HAS_CUDA)
# The C++ standard torch compiles its own extensions with (torch.utils.cpp_extension): C++20 from
# torch 2.13 on (2.14's headers need it: `requires` clauses), C++17 before.
list(GET _brevitas_torch_facts 4 BREVITAS_CPP_CXX_STANDARD)
string(REGEX REPLACE "\\+.*$" "" BREVITAS_CPP_TORCH_VERSION "${BREVITAS_CPP_TORCH_VERSION}")
set(BREVITAS_CPP_TORCH_LIB_DIR "${_brevitas_torch_root}/lib")

add_library(brevitas_cpp::torch INTERFACE IMPORTED)
set(_brevitas_torch_libs "")
foreach(_lib torch torch_cpu c10)
  find_library(BREVITAS_CPP_TORCH_LIB_${_lib} ${_lib} PATHS "${BREVITAS_CPP_TORCH_LIB_DIR}" NO_DEFAULT_PATH)
  if(NOT BREVITAS_CPP_TORCH_LIB_${_lib})
    message(FATAL_ERROR "brevitas_cpp: lib${_lib} not found in ${BREVITAS_CPP_TORCH_LIB_DIR}")
  endif()
  list(APPEND _brevitas_torch_libs "${BREVITAS_CPP_TORCH_LIB_${_lib}}")
endforeach()
set_target_properties(brevitas_cpp::torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES
    "${_brevitas_torch_root}/include;${_brevitas_torch_root}/include/torch/csrc/api/include"
  INTERFACE_LINK_LIBRARIES "${_brevitas_torch_libs}"
  INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=${_brevitas_torch_cxx11_abi}")
message(STATUS "brevitas_cpp: torch ${BREVITAS_CPP_TORCH_VERSION} from ${_brevitas_torch_root} "
               "(CUDA build: ${BREVITAS_CPP_TORCH_HAS_CUDA}, C++${BREVITAS_CPP_CXX_STANDARD})")
