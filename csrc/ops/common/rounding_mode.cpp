#include "ops/common/quant_math.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <string>

namespace brevitas_cpp {

RoundingMode parse_rounding_mode(c10::string_view name, const char* op) {
  std::string lower(name.begin(), name.end());
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "round") return RoundingMode::kRound;
  if (lower == "ceil") return RoundingMode::kCeil;
  if (lower == "floor") return RoundingMode::kFloor;
  if (lower == "round_to_zero") return RoundingMode::kRoundToZero;
  if (lower == "dpu") return RoundingMode::kDpu;
  TORCH_CHECK(false, "brevitas_cpp::", op, ": rounding_mode '", std::string(name.begin(), name.end()),
              "' is unknown; accepted (case-insensitive): round, ceil, floor, round_to_zero, dpu");
}

const char* rounding_mode_name(RoundingMode mode) {
  switch (mode) {
    case RoundingMode::kRound:
      return "round";
    case RoundingMode::kCeil:
      return "ceil";
    case RoundingMode::kFloor:
      return "floor";
    case RoundingMode::kRoundToZero:
      return "round_to_zero";
    case RoundingMode::kDpu:
      return "dpu";
  }
  return "unknown";
}

}  // namespace brevitas_cpp
