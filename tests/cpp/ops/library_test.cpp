// The op library loads and registers every op in a process without Python: this test binary
// links only libtorch and brevitas_cpp_ops (no libpython, no libtorch_python).
#include "../test_utils.h"

#include "build_info.h"
#include "ops/int_quant.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <fstream>
#include <string>

namespace brevitas_cpp {
namespace {

const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> ops{"round_ste",
                                            "ceil_ste",
                                            "floor_ste",
                                            "round_to_zero_ste",
                                            "dpu_round_ste",
                                            "tensor_clamp_ste",
                                            "scalar_clamp_ste",
                                            "scalar_clamp_min_ste",
                                            "scalar_signed_clamp_min_ste",
                                            "binary_sign_ste",
                                            "ternary_sign_ste",
                                            "abs_binary_sign_grad",
                                            "_abs_binary_sign_grad_backward",
                                            "int_quant",
                                            "_int_quant_with_mask",
                                            "_int_quant_backward",
                                            "relu_int_quant",
                                            "_relu_int_quant_backward",
                                            "binary_quant",
                                            "_binary_quant_backward",
                                            "clamped_binary_quant",
                                            "_clamped_binary_quant_backward",
                                            "ternary_quant",
                                            "_ternary_quant_backward",
                                            "quantization_int8",
                                            "_quantization_int8_backward",
                                            "float_quant",
                                            "_float_quant_backward",
                                            "abs_max_int_quant",
                                            "_abs_max_int_quant_backward",
                                            "abs_percentile_int_quant",
                                            "_abs_percentile_int_quant_backward",
                                            "learned_int_quant",
                                            "_learned_int_quant_backward"};
  return ops;
}

// The statistics average and maximum over ranks (ops/stats_all_reduce.h): device-generic kernels
// (CompositeExplicitAutograd, on c10d collectives), Meta and Autograd kernels.
const std::vector<std::string>& composite_ops() {
  static const std::vector<std::string> ops{"stats_all_reduce_mean", "_all_reduce_mean", "_all_reduce_max"};
  return ops;
}

// Its process-wide switch (no tensors: one catch-all kernel).
const std::vector<std::string>& state_ops() {
  static const std::vector<std::string> ops{"_set_stats_sync", "_get_stats_sync", "_stats_stay_local"};
  return ops;
}

std::string loaded_objects() {
  std::ifstream maps("/proc/self/maps");
  return std::string(std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>());
}

TEST(Library, LoadsWithoutPython) {
  const std::string maps = loaded_objects();
  ASSERT_FALSE(maps.empty());
  EXPECT_NE(maps.find("libbrevitas_cpp_ops"), std::string::npos) << "the op library is not mapped";
  EXPECT_EQ(maps.find("libpython"), std::string::npos) << "libpython is loaded";
  EXPECT_EQ(maps.find("libtorch_python"), std::string::npos) << "libtorch_python is loaded";
  // The ops are usable in this process.
  const at::Tensor y = ops::int_quant(at::full({2}, 1.26), at::full({}, 0.5), at::zeros({}), at::full({}, 8.), true,
                                      false, "round", false);
  EXPECT_TRUE(test::bitwise_equal(y, at::full({2}, 1.5f)));
}

TEST(Library, EveryOpRegisteredWithCpuMetaAutograd) {
  auto& d = c10::Dispatcher::singleton();
  for (const auto& name : all_ops()) {
    const auto op = d.findSchemaOrThrow(("brevitas_cpp::" + name).c_str(), "");
    EXPECT_EQ(op.schema().name(), "brevitas_cpp::" + name);
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::CPU)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Autograd)) << name;
  }
  for (const auto& name : composite_ops()) {
    const auto op = d.findSchemaOrThrow(("brevitas_cpp::" + name).c_str(), "");
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Autograd)) << name;
  }
  for (const auto& name : state_ops()) d.findSchemaOrThrow(("brevitas_cpp::" + name).c_str(), "");
  {  // NoUnexpectedOps
    std::vector<std::string> expected = all_ops();
    expected.insert(expected.end(), composite_ops().begin(), composite_ops().end());
    expected.insert(expected.end(), state_ops().begin(), state_ops().end());
    size_t ours = 0;
    for (const auto& op : c10::Dispatcher::singleton().getAllOpNames()) {
      if (op.name.rfind("brevitas_cpp::", 0) == 0) {
        ++ours;
        const std::string bare = op.name.substr(std::string("brevitas_cpp::").size());
        EXPECT_NE(std::find(expected.begin(), expected.end(), bare), expected.end()) << "unexpected op " << op.name;
      }
    }
    EXPECT_EQ(ours, expected.size());
  }
  {  // UnknownOpThrows
    EXPECT_THROW(c10::Dispatcher::singleton().findSchemaOrThrow("brevitas_cpp::no_such_op", ""), c10::Error);
  }
}

TEST(Library, BuildInfo) {
  const BuildInfo info = build_info();
  EXPECT_FALSE(info.torch_version.empty());
  EXPECT_EQ(info.torch_version.substr(0, info.torch_version.find('+')),
            std::string(TORCH_VERSION).substr(0, std::string(TORCH_VERSION).find('+')));
  EXPECT_FALSE(info.vector_isa.empty());
  EXPECT_FALSE(info.active_isa.empty());
}

}  // namespace
}  // namespace brevitas_cpp
