# Whether and how the CUDA kernels (csrc/ops/cuda) are built.
#
# BREVITAS_CPP_CUDA (environment or -D): 1 builds them (an error without a CUDA torch and
# nvcc), 0 leaves them out; unset builds them when the installed torch has CUDA and nvcc is
# found (PATH, CUDACXX, CUDA_HOME, /usr/local/cuda). A CPU torch builds exactly as before.
# Architectures come from TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX" style, as torch's own
# extension builds read it), by default 7.5, 8.0 and 9.0 with PTX for newer GPUs.
#
# Sets BREVITAS_CPP_WITH_CUDA, BREVITAS_CPP_CUDA_ARCH_LIST (as given) and, when on, enables
# the CUDA language with CMAKE_CUDA_ARCHITECTURES and the target brevitas_cpp::torch_cuda.
set(_brevitas_cuda_request "")
if(DEFINED ENV{BREVITAS_CPP_CUDA})
  set(_brevitas_cuda_request "$ENV{BREVITAS_CPP_CUDA}")
elseif(DEFINED BREVITAS_CPP_CUDA)
  set(_brevitas_cuda_request "${BREVITAS_CPP_CUDA}")
endif()
string(TOUPPER "${_brevitas_cuda_request}" _brevitas_cuda_request)
if(NOT _brevitas_cuda_request MATCHES "^(|0|1|ON|OFF)$")
  message(FATAL_ERROR "brevitas_cpp: BREVITAS_CPP_CUDA='${_brevitas_cuda_request}' is not understood; "
                      "accepted: 1 or ON (build the CUDA kernels), 0 or OFF (leave them out), unset (automatic)")
endif()

# nvcc where torch.utils.cpp_extension would look for it, when it is not on PATH.
if(NOT DEFINED ENV{CUDACXX} AND NOT CMAKE_CUDA_COMPILER)
  find_program(_brevitas_nvcc nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin" /usr/local/cuda/bin)
  if(_brevitas_nvcc)
    set(CMAKE_CUDA_COMPILER "${_brevitas_nvcc}")
  endif()
endif()

set(BREVITAS_CPP_WITH_CUDA OFF)
if(_brevitas_cuda_request MATCHES "^(1|ON)$")
  if(NOT BREVITAS_CPP_TORCH_HAS_CUDA)
    message(FATAL_ERROR "brevitas_cpp: BREVITAS_CPP_CUDA=1 but the installed torch has no CUDA "
                        "(torch.version.cuda is None); install a CUDA build of torch or unset it")
  endif()
  set(BREVITAS_CPP_WITH_CUDA ON)
elseif(_brevitas_cuda_request STREQUAL "" AND BREVITAS_CPP_TORCH_HAS_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(BREVITAS_CPP_WITH_CUDA ON)
  else()
    message(STATUS "brevitas_cpp: torch has CUDA but no nvcc was found: CPU kernels only "
                   "(set CUDACXX or CUDA_HOME, or BREVITAS_CPP_CUDA=1 to make this an error)")
  endif()
endif()

if(BREVITAS_CPP_WITH_CUDA)
  set(BREVITAS_CPP_CUDA_ARCH_LIST "$ENV{TORCH_CUDA_ARCH_LIST}")
  if(BREVITAS_CPP_CUDA_ARCH_LIST STREQUAL "")
    set(BREVITAS_CPP_CUDA_ARCH_LIST "7.5;8.0;9.0+PTX")
  endif()
  string(REPLACE " " ";" _brevitas_archs "${BREVITAS_CPP_CUDA_ARCH_LIST}")
  set(CMAKE_CUDA_ARCHITECTURES "")
  foreach(_arch IN LISTS _brevitas_archs)
    if(_arch MATCHES "^([0-9]+)\\.([0-9]+)([af]?)(\\+PTX)?$")
      # "X.Y" is machine code for sm_XY; "+PTX" adds the PTX that newer GPUs compile at load.
      if(CMAKE_MATCH_4)
        list(APPEND CMAKE_CUDA_ARCHITECTURES "${CMAKE_MATCH_1}${CMAKE_MATCH_2}${CMAKE_MATCH_3}")
      else()
        list(APPEND CMAKE_CUDA_ARCHITECTURES "${CMAKE_MATCH_1}${CMAKE_MATCH_2}${CMAKE_MATCH_3}-real")
      endif()
    elseif(NOT _arch STREQUAL "")
      message(FATAL_ERROR "brevitas_cpp: TORCH_CUDA_ARCH_LIST entry '${_arch}' is not understood; "
                          "accepted: compute capabilities such as '8.0;9.0+PTX' or '8.6 9.0a'")
    endif()
  endforeach()
  if(NOT CMAKE_CUDA_HOST_COMPILER)
    set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}")
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # the libcudart torch has already loaded
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD ${BREVITAS_CPP_CXX_STANDARD})
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)

  add_library(brevitas_cpp::torch_cuda INTERFACE IMPORTED)
  set(_brevitas_torch_cuda_libs "")
  foreach(_lib torch_cuda c10_cuda)
    find_library(BREVITAS_CPP_TORCH_LIB_${_lib} ${_lib} PATHS "${BREVITAS_CPP_TORCH_LIB_DIR}" NO_DEFAULT_PATH)
    if(NOT BREVITAS_CPP_TORCH_LIB_${_lib})
      message(FATAL_ERROR "brevitas_cpp: lib${_lib} not found in ${BREVITAS_CPP_TORCH_LIB_DIR}")
    endif()
    list(APPEND _brevitas_torch_cuda_libs "${BREVITAS_CPP_TORCH_LIB_${_lib}}")
  endforeach()
  set_target_properties(brevitas_cpp::torch_cuda PROPERTIES
    INTERFACE_LINK_LIBRARIES "${_brevitas_torch_cuda_libs};CUDA::cudart")
  message(STATUS "brevitas_cpp: CUDA kernels for ${CMAKE_CUDA_ARCHITECTURES} "
                 "(nvcc ${CMAKE_CUDA_COMPILER_VERSION}, TORCH_CUDA_ARCH_LIST '${BREVITAS_CPP_CUDA_ARCH_LIST}')")
else()
  set(BREVITAS_CPP_CUDA_ARCH_LIST "")
  message(STATUS "brevitas_cpp: no CUDA kernels")
endif()
