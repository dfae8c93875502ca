#pragma once

#include "ops/common/checks.h"
#include "ops/common/param_layout.h"

namespace brevitas_cpp::meta {

// Meta kernel of an elementwise op of one floating tensor named by kName.
template <const char* kName>
at::Tensor unary_meta(const at::Tensor& x) {
  check_floating(x, kName, "x");
  return empty_output_like(x);
}

}  // namespace brevitas_cpp::meta
