// Registers the CPU kernels of the instruction set chosen at load time.
#include "ops/cpu/kernels.h"

#include <ATen/Version.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "AVX512";
    case Isa::kAvx2:
      return "AVX2";
    default:
      return "DEFAULT";
  }
}

const char* compiled_isas() {
#if defined(BREVITAS_CPP_HAVE_AVX512)
  return "DEFAULT AVX2 AVX512";
#elif defined(BREVITAS_CPP_HAVE_AVX2)
  return "DEFAULT AVX2";
#else
  return "DEFAULT";
#endif
}

Isa active_isa() {
  static const Isa isa = [] {
    const std::string cap = at::get_cpu_capability();
#if defined(BREVITAS_CPP_HAVE_AVX512)
    if (cap.find("AVX512") != std::string::npos) return Isa::kAvx512;
#endif
#if defined(BREVITAS_CPP_HAVE_AVX2)
    if (cap.find("AVX512") != std::string::npos || cap.find("AVX2") != std::string::npos) return Isa::kAvx2;
#endif
    return Isa::kDefault;
  }();
  return isa;
}

namespace {

// Calls the kernel compiled for the active instruction set.
template <auto kDefault, auto kAvx2, auto kAvx512>
struct IsaDispatch;

template <typename R, typename... A, R (*kDefault)(A...), R (*kAvx2)(A...), R (*kAvx512)(A...)>
struct IsaDispatch<kDefault, kAvx2, kAvx512> {
  static R call(A... args) {
    switch (active_isa()) {
#if defined(BREVITAS_CPP_HAVE_AVX512)
      case Isa::kAvx512:
        return kAvx512(args...);
#endif
#if defined(BREVITAS_CPP_HAVE_AVX2)
      case Isa::kAvx2:
        return kAvx2(args...);
#endif
      default:
        return kDefault(args...);
    }
  }
};

}  // namespace

#if !defined(BREVITAS_CPP_HAVE_AVX2)
#define BREVITAS_CPP_AVX2_OR_DEFAULT DEFAULT
#else
#define BREVITAS_CPP_AVX2_OR_DEFAULT AVX2
#endif
#if !defined(BREVITAS_CPP_HAVE_AVX512)
#define BREVITAS_CPP_AVX512_OR_DEFAULT DEFAULT
#else
#define BREVITAS_CPP_AVX512_OR_DEFAULT AVX512
#endif

#define BREVITAS_CPP_IMPL(m, op, kernel)                                                    \
  m.impl(op, TORCH_FN((IsaDispatch<&DEFAULT::kernel, &BREVITAS_CPP_AVX2_OR_DEFAULT::kernel, \
                                   &BREVITAS_CPP_AVX512_OR_DEFAULT::kernel>::call)))

TORCH_LIBRARY_IMPL(brevitas_cpp, CPU, m) {
  BREVITAS_CPP_IMPL(m, "round_ste", round_ste_cpu);
  BREVITAS_CPP_IMPL(m, "ceil_ste", ceil_ste_cpu);
  BREVITAS_CPP_IMPL(m, "floor_ste", floor_ste_cpu);
  BREVITAS_CPP_IMPL(m, "round_to_zero_ste", round_to_zero_ste_cpu);
  BREVITAS_CPP_IMPL(m, "dpu_round_ste", dpu_round_ste_cpu);
  BREVITAS_CPP_IMPL(m, "binary_sign_ste", binary_sign_ste_cpu);
  BREVITAS_CPP_IMPL(m, "ternary_sign_ste", ternary_sign_ste_cpu);
  BREVITAS_CPP_IMPL(m, "abs_binary_sign_grad", abs_binary_sign_grad_cpu);
  BREVITAS_CPP_IMPL(m, "_abs_binary_sign_grad_backward", abs_binary_sign_grad_backward_cpu);
  BREVITAS_CPP_IMPL(m, "tensor_clamp_ste", tensor_clamp_ste_cpu);
  BREVITAS_CPP_IMPL(m, "scalar_clamp_ste", scalar_clamp_ste_cpu);
  BREVITAS_CPP_IMPL(m, "scalar_clamp_min_ste", scalar_clamp_min_ste_cpu);
  BREVITAS_CPP_IMPL(m, "scalar_signed_clamp_min_ste", scalar_signed_clamp_min_ste_cpu);
  BREVITAS_CPP_IMPL(m, "int_quant", int_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_int_quant_with_mask", int_quant_with_mask_cpu);
  BREVITAS_CPP_IMPL(m, "_int_quant_backward", int_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "relu_int_quant", relu_int_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_relu_int_quant_backward", relu_int_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "abs_max_int_quant", abs_max_int_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_abs_max_int_quant_backward", abs_max_int_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "abs_percentile_int_quant", abs_percentile_int_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_abs_percentile_int_quant_backward", abs_percentile_int_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "learned_int_quant", learned_int_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_learned_int_quant_backward", learned_int_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "binary_quant", binary_quant_cpu);
  BREVITAS_CPP_IMPL(m, "clamped_binary_quant", clamped_binary_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_binary_quant_backward", binary_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "_clamped_binary_quant_backward", clamped_binary_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "ternary_quant", ternary_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_ternary_quant_backward", ternary_quant_backward_cpu);
  BREVITAS_CPP_IMPL(m, "quantization_int8", quantization_int8_cpu);
  BREVITAS_CPP_IMPL(m, "_quantization_int8_backward", quantization_int8_backward_cpu);
  BREVITAS_CPP_IMPL(m, "float_quant", float_quant_cpu);
  BREVITAS_CPP_IMPL(m, "_float_quant_backward", float_quant_backward_cpu);
}

}  // namespace brevitas_cpp::cpu
