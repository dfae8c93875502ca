// A quantized model saved by Python runs in C++ without Python: torch::jit::load finds the
// brevitas_cpp ops through the static registrations of libbrevitas_cpp_ops.so (linked into this
// binary), and forward and backward give the values Python recorded.
//
// The fixture is written by tests/cpp/jit/make_fixture.py, which ctest runs first (a ctest
// fixture, see CMakeLists.txt); a missing fixture fails these tests. It holds model.pt, the
// SmallQuantCNN compiled by torch.jit.script, fresh and in train mode (so its first forward is a step of the activation
// quantizers' statistics warm-up, run by the compiled control flow), and expected.pt, a module whose attributes are the
// input, the output, the gradient of sum(output * linspace(-1, 1)) with respect to the input, and each parameter's
// gradient ("grad_" + name with '.' -> '_'). Its directory is $BREVITAS_CPP_JIT_FIXTURE, else <build dir>/jit_fixture.
#include "../test_utils.h"

#include <torch/csrc/jit/passes/inliner.h>
#include <torch/script.h>

#include <cstdlib>
#include <fstream>
#include <string>

#ifndef BREVITAS_CPP_JIT_FIXTURE_DIR
#define BREVITAS_CPP_JIT_FIXTURE_DIR "jit_fixture"
#endif

namespace brevitas_cpp {
namespace {

std::string fixture_dir() {
  const char* env = std::getenv("BREVITAS_CPP_JIT_FIXTURE");
  return (env != nullptr && *env != '\0') ? std::string(env) : std::string(BREVITAS_CPP_JIT_FIXTURE_DIR);
}

bool is_file(const std::string& path) {
  return std::ifstream(path).good();
}

std::string attr_name(std::string parameter_name) {
  std::replace(parameter_name.begin(), parameter_name.end(), '.', '_');
  return "grad_" + parameter_name;
}

class LoadScriptedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = fixture_dir();
    const std::string model_path = dir + "/model.pt", expected_path = dir + "/expected.pt";
    // No fixture is a failure, never a skip: ctest writes it first (the make_jit_fixture test).
    if (!is_file(model_path) || !is_file(expected_path)) {
      GTEST_FAIL() << "no TorchScript fixture in " << dir << ": ctest writes it with the "
                   << "make_jit_fixture test (tests/cpp/jit/make_fixture.py, which needs the "
                   << "installed brevitas_cpp); set BREVITAS_CPP_JIT_FIXTURE to read it from "
                   << "another directory";
    }
    model_ = torch::jit::load(model_path);
    expected_ = torch::jit::load(expected_path);
  }

  at::Tensor expected(const std::string& name) const { return expected_.attr(name).toTensor(); }

  torch::jit::Module model_;
  torch::jit::Module expected_;
};

TEST_F(LoadScriptedModel, GraphCallsTheBrevitasOps) {
  // The quantizers run as our ops (not as a Python fallback), which the op library provides.
  auto graph = model_.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  const std::string text = graph->toString();
  EXPECT_NE(text.find("brevitas_cpp::int_quant"), std::string::npos) << text;
  // Scripted, not traced: the train/eval and warm-up branches are in the graph.
  EXPECT_NE(text.find("prim::If"), std::string::npos) << text;
  EXPECT_TRUE(model_.is_training()) << "the fixture model was saved in train mode";
}

TEST_F(LoadScriptedModel, ForwardAndBackwardMatchPython) {
  const at::Tensor input = expected("input").clone().requires_grad_(true);
  const at::Tensor output = model_.forward({input}).toTensor();
  EXPECT_TRUE(test::bitwise_equal(output.detach(), expected("output")));

  // The loss of the Python side: distinct weights per element, so a permutation would show.
  const at::Tensor weights = torch::linspace(-1.0, 1.0, output.numel()).view_as(output);
  (output * weights).sum().backward();
  EXPECT_TRUE(test::bitwise_equal(input.grad(), expected("input_grad")));

  int compared = 0;
  for (const auto& p : model_.named_parameters(/*recurse=*/true)) {
    const at::Tensor grad = p.value.grad();
    const std::string name = attr_name(p.name);
    ASSERT_EQ(grad.defined(), expected_.hasattr(name)) << p.name << ": gradient presence differs";
    if (!grad.defined()) continue;
    // Same kernels as in Python; parameter gradients are reductions, whose summation order may
    // depend on the thread split, hence a float32 rounding tolerance rather than bit equality.
    EXPECT_TRUE(torch::allclose(grad, expected(name), /*rtol=*/1e-5, /*atol=*/1e-7)) << p.name << ":\n"
                                                                                     << grad << "\nvs\n"
                                                                                     << expected(name);
    ++compared;
  }
  // conv and fc weights and biases, and the learned activation scales.
  EXPECT_GE(compared, 7);
}

// Seed 003's quantizers keep their statistics in buffers the op updates in place: a model loaded
// in C++ trains them as Python does (ema_model.pt / ema_expected.pt, written with the fixture).
TEST(LoadScriptedEmaModel, TrainingForwardsUpdateTheThresholdsAsInPython) {
  const std::string dir = fixture_dir();
  const std::string model_path = dir + "/ema_model.pt", expected_path = dir + "/ema_expected.pt";
  if (!is_file(model_path) || !is_file(expected_path)) {
    GTEST_FAIL() << "no seed-003 fixture in " << dir << " (tests/cpp/jit/make_fixture.py writes it)";
  }
  torch::jit::Module model = torch::jit::load(model_path);
  const torch::jit::Module expected = torch::jit::load(expected_path);
  ASSERT_TRUE(model.is_training());
  torch::NoGradGuard no_grad;
  model.forward({expected.attr("input0").toTensor()});
  const at::Tensor output = model.forward({expected.attr("input1").toTensor()}).toTensor();
  EXPECT_TRUE(test::bitwise_equal(output, expected.attr("output1").toTensor()));
  int compared = 0;
  for (const auto& b : model.named_buffers(/*recurse=*/true)) {
    std::string name = b.name;
    std::replace(name.begin(), name.end(), '.', '_');
    if (!expected.hasattr(name)) continue;
    const at::Tensor want = expected.attr(name).toTensor();
    // The counters are integers (bitwise_equal compares floating tensors by their bits).
    EXPECT_TRUE(b.value.is_floating_point() ? test::bitwise_equal(b.value, want) : at::equal(b.value, want))
        << b.name << ": " << b.value << " vs " << want;
    ++compared;
  }
  EXPECT_EQ(compared, 6);  // threshold and iteration of the input, conv weight and ReLU quantizers
}

}  // namespace
}  // namespace brevitas_cpp
