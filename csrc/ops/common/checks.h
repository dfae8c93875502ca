// Argument validation shared by the CPU and Meta kernels. Every message names the op,
// the argument, the value received and what is accepted.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <optional>
#include <string>
#include <utility>

namespace brevitas_cpp {

// x is float32, float64, float16 or bfloat16.
void check_floating(const at::Tensor& t, const char* op, const char* arg);

// `t` has exactly the dtype of x (scale and zero point are computed with in x's dtype).
void check_same_dtype_as_input(const at::Tensor& t, const at::Tensor& x, const char* op, const char* arg);

// Every tensor lives on x's device.
void check_same_device(const at::Tensor& x, c10::ArrayRef<std::pair<const at::Tensor*, const char*>> args,
                       const char* op);

// `t` broadcasts to x's shape without expanding x (the result keeps x's shape).
void check_broadcasts_to_input(const at::Tensor& t, const at::Tensor& x, const char* op, const char* arg);

// A tensor that must hold one value (bit width).
void check_single_value(const at::Tensor& t, const char* op, const char* arg);

// Which scales an op accepts: positive and finite (binary and ternary quantizers, exact for any
// such scale), or also normal in x's dtype (int_quant, float_quant: scalar_math::is_normal_scale).
enum class ScaleRange { kPositive, kNormal };

// Value checks, run where the values live (CPU tensors are read directly; the CUDA and composite
// kernels give NaN instead).
void check_scale(const at::Tensor& scale, ScaleRange range, const char* op);
void check_finite(const at::Tensor& t, const char* op, const char* arg);

// What kNormal accepts, for messages: "a normal positive finite number (>= 1.17549e-38 for float32)".
std::string normal_scale_range(at::ScalarType dtype);

// A bit width's metadata: one value of a real (integer or floating) dtype. Its value is
// checked where it lives: by check_bit_width on the CPU, inside the kernels on a GPU.
void check_bit_width_dtype(const at::Tensor& bit_width, const char* op);

// Reads a CPU bit width and checks that it is an integer in [1, 32]; returns it.
int64_t check_bit_width(const at::Tensor& bit_width, const char* op);

void check_scalar_bounds(double min_val, double max_val, const char* op);

// A scale's lower bound: None, or a finite number >= 0 that x's dtype holds (x_name: x's name).
void check_scaling_min_val(std::optional<double> scaling_min_val, const at::Tensor& x, const char* op,
                           const char* x_name);

}  // namespace brevitas_cpp
