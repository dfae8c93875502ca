// The CPU kernels. Each kernel source is compiled once per instruction set, into
// brevitas_cpp::cpu::DEFAULT, ::AVX2 and ::AVX512 (CPU_CAPABILITY names the current one);
// register_kernels.cpp picks the best one the machine runs at load time.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <optional>
#include <tuple>

#define BREVITAS_CPP_DECLARE_CPU_KERNELS                                                                              \
  at::Tensor round_ste_cpu(const at::Tensor& x);                                                                      \
  at::Tensor ceil_ste_cpu(const at::Tensor& x);                                                                       \
  at::Tensor floor_ste_cpu(const at::Tensor& x);                                                                      \
  at::Tensor round_to_zero_ste_cpu(const at::Tensor& x);                                                              \
  at::Tensor dpu_round_ste_cpu(const at::Tensor& x);                                                                  \
  at::Tensor binary_sign_ste_cpu(const at::Tensor& x);                                                                \
  at::Tensor ternary_sign_ste_cpu(const at::Tensor& x);                                                               \
  at::Tensor abs_binary_sign_grad_cpu(const at::Tensor& x);                                                           \
  at::Tensor abs_binary_sign_grad_backward_cpu(const at::Tensor& grad, const at::Tensor& x);                          \
  at::Tensor tensor_clamp_ste_cpu(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val);         \
  at::Tensor scalar_clamp_ste_cpu(const at::Tensor& x, double min_val, double max_val);                               \
  at::Tensor scalar_clamp_min_ste_cpu(const at::Tensor& x, double min_val);                                           \
  at::Tensor scalar_signed_clamp_min_ste_cpu(const at::Tensor& x, double min_val);                                    \
  at::Tensor int_quant_cpu(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,                \
                           const at::Tensor& bit_width, bool is_signed, bool narrow_range,                            \
                           c10::string_view rounding_mode, bool clamp_ste);                                           \
  std::tuple<at::Tensor, at::Tensor> int_quant_with_mask_cpu(                                                         \
      const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width,        \
      bool is_signed, bool narrow_range, c10::string_view rounding_mode);                                             \
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int_quant_backward_cpu(                                  \
      const at::Tensor& grad, const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& mask,              \
      const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,             \
      bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask);            \
  at::Tensor relu_int_quant_cpu(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,           \
                                const at::Tensor& bit_width, bool is_signed, bool narrow_range,                       \
                                c10::string_view rounding_mode, bool clamp_ste);                                      \
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> relu_int_quant_backward_cpu(                             \
      const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,             \
      const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, \
      std::array<bool, 4> output_mask);                                                                               \
  std::tuple<at::Tensor, at::Tensor> abs_max_int_quant_cpu(                                                           \
      const at::Tensor& w, const at::Tensor& bit_width, std::optional<int64_t> channel_dim, bool is_signed,           \
      bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode, bool clamp_ste);      \
  at::Tensor abs_max_int_quant_backward_cpu(                                                                          \
      const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale, const at::Tensor& w,                       \
      const at::Tensor& scale, const at::Tensor& bit_width, std::optional<int64_t> channel_dim, bool is_signed,       \
      bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode, bool clamp_ste);      \
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant_cpu(                            \
      const at::Tensor& x, const std::optional<at::Tensor>& zero_grad_param, const at::Tensor& bit_width, int64_t k,  \
      bool is_signed, bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode,       \
      bool clamp_ste, bool relu);                                                                                     \
  at::Tensor abs_percentile_int_quant_backward_cpu(                                                                   \
      const std::optional<at::Tensor>& grad, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,        \
      const at::Tensor& scale, const at::Tensor& index, const at::Tensor& bit_width, bool is_signed,                  \
      bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, bool relu);                                  \
  std::tuple<at::Tensor, at::Tensor> learned_int_quant_cpu(                                                           \
      const at::Tensor& x, const at::Tensor& value, const at::Tensor& threshold, const at::Tensor& zero_point,        \
      const at::Tensor& bit_width, bool is_signed, bool narrow_range, std::optional<double> min_val,                  \
      c10::string_view rounding_mode, bool clamp_ste, bool relu);                                                     \
  std::tuple<at::Tensor, at::Tensor> learned_int_quant_backward_cpu(                                                  \
      const std::optional<at::Tensor>& grad_y, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,      \
      const at::Tensor& scale, const at::Tensor& thresh, const at::Tensor& zero_point, const at::Tensor& bit_width,   \
      bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, bool relu,                   \
      std::array<bool, 2> output_mask);                                                                               \
  at::Tensor binary_quant_cpu(const at::Tensor& x, const at::Tensor& scale);                                          \
  at::Tensor clamped_binary_quant_cpu(const at::Tensor& x, const at::Tensor& scale);                                  \
  std::tuple<at::Tensor, at::Tensor> binary_quant_backward_cpu(                                                       \
      const at::Tensor& grad, const std::optional<at::Tensor>& x, const at::Tensor& scale,                            \
      std::array<bool, 2> output_mask);                                                                               \
  std::tuple<at::Tensor, at::Tensor> clamped_binary_quant_backward_cpu(                                               \
      const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, std::array<bool, 2> output_mask);         \
  at::Tensor ternary_quant_cpu(const at::Tensor& x, const at::Tensor& scale, double threshold);                       \
  std::tuple<at::Tensor, at::Tensor> ternary_quant_backward_cpu(const at::Tensor& grad, const at::Tensor& x,          \
                                                                const at::Tensor& scale, double threshold,            \
                                                                std::array<bool, 2> output_mask);                     \
  std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8_cpu(                                               \
      const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration, int64_t nbits, bool is_weight,               \
      std::optional<int64_t> channel_axis, double ema_decay, int64_t delay_quant, c10::string_view grad_mode,         \
      c10::string_view quant_mode, bool training);                                                                    \
  at::Tensor quantization_int8_backward_cpu(const at::Tensor& grad, const at::Tensor& x,                              \
                                            const at::Tensor& clip_threshold);                                        \
  at::Tensor float_quant_cpu(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,                \
                             int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,     \
                             bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode);      \
  std::tuple<at::Tensor, at::Tensor> float_quant_backward_cpu(                                                        \
      const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,               \
      int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,           \
      bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask);

namespace brevitas_cpp::cpu {
namespace DEFAULT {
BREVITAS_CPP_DECLARE_CPU_KERNELS
}  // namespace DEFAULT
namespace AVX2 {
BREVITAS_CPP_DECLARE_CPU_KERNELS
}  // namespace AVX2
namespace AVX512 {
BREVITAS_CPP_DECLARE_CPU_KERNELS
}  // namespace AVX512

// Instruction sets, best last.
enum class Isa : int { kDefault = 0, kAvx2 = 1, kAvx512 = 2 };

// The instruction set of the kernels in use: the best one both compiled in and reported by
// ATen for this machine (so ATEN_CPU_CAPABILITY=default|avx2|avx512 selects it too).
Isa active_isa();
const char* isa_name(Isa isa);
// The instruction sets compiled into this library, e.g. "DEFAULT AVX2 AVX512".
const char* compiled_isas();

}  // namespace brevitas_cpp::cpu
