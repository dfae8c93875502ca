// stats_all_reduce_mean, _all_reduce_mean and the stats-sync state from C++ (no Python):
// single process (an exact copy with identity gradient, the setters, the errors), then the
// collective path through a two-rank process group whose backend stands in for rank 1 by
// adding that rank's known contribution, registered in c10d's group registry as
// torch.distributed would register a real one.
#include "ops/stats_all_reduce.h"
#include "ops/quantization_int8.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <string>
#include <tuple>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// Restores the default state (sync on, auto group) after each test.
class StatsAllReduce : public ::testing::Test {
 protected:
  void TearDown() override { ops::set_stats_sync(ops::StatsSync{}); }
};

TEST_F(StatsAllReduce, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::stats_all_reduce_mean", "").schema()),
            "brevitas_cpp::stats_all_reduce_mean(Tensor x) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_all_reduce_mean", "").schema()),
            "brevitas_cpp::_all_reduce_mean(Tensor x, str group_name) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_set_stats_sync", "").schema()),
            "brevitas_cpp::_set_stats_sync(bool enabled, str? group_name=None) -> ()");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_get_stats_sync", "").schema()),
            "brevitas_cpp::_get_stats_sync() -> (bool enabled, str? group_name)");
}

TEST_F(StatsAllReduce, SingleProcessIsAnExactCopyWithIdentityGradient) {
  // No group named "0" is registered in this process: the auto mode is a single process.
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x0 = test::values({-0.0, 1.5, test::nan(), test::inf(), -3.25}, dtype);
    at::Tensor x = test::leaf(x0);
    const at::Tensor y = ops::stats_all_reduce_mean(x);
    EXPECT_TRUE(bitwise_equal(y.detach(), x0)) << dtype;
    EXPECT_NE(y.data_ptr(), x.data_ptr());
    const at::Tensor g = test::values({1., 2., 3., 4., 5.}, dtype);
    EXPECT_TRUE(bitwise_equal(test::grads(y, {x}, g)[0], g)) << dtype;
  }
  // Non-contiguous input: a contiguous copy.
  const at::Tensor t = at::randn({3, 4}).t();
  const at::Tensor y = ops::stats_all_reduce_mean(t);
  EXPECT_TRUE(y.is_contiguous());
  EXPECT_TRUE(bitwise_equal(y, t));
  // Meta: shape and dtype, contiguous.
  const at::Tensor m = ops::stats_all_reduce_mean(at::empty({2, 3}, at::TensorOptions().device(at::kMeta)).t());
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(m.is_contiguous());
}

TEST_F(StatsAllReduce, StateSettersAndOps) {
  EXPECT_TRUE(ops::get_stats_sync().enabled);
  EXPECT_FALSE(ops::get_stats_sync().group_name.has_value());
  ops::set_stats_sync({false, std::string("7")});
  EXPECT_FALSE(ops::get_stats_sync().enabled);
  EXPECT_EQ(ops::get_stats_sync().group_name, std::optional<std::string>("7"));
  // The ops see (and set) the same state.
  auto& d = c10::Dispatcher::singleton();
  const auto get =
      d.findSchemaOrThrow("brevitas_cpp::_get_stats_sync", "").typed<std::tuple<bool, std::optional<std::string>>()>();
  const auto set =
      d.findSchemaOrThrow("brevitas_cpp::_set_stats_sync", "").typed<void(bool, std::optional<c10::string_view>)>();
  EXPECT_EQ(get.call(), std::make_tuple(false, std::optional<std::string>("7")));
  set.call(true, std::nullopt);
  EXPECT_TRUE(ops::get_stats_sync().enabled);
  EXPECT_FALSE(ops::get_stats_sync().group_name.has_value());
  try {
    ops::set_stats_sync({true, std::string()});
    ADD_FAILURE() << "an empty group name was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("group_name must be the name of a registered process group"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(StatsAllReduce, UnknownExplicitGroupIsAnErrorUnlessDisabled) {
  ops::set_stats_sync({true, std::string("no-such-group")});
  const at::Tensor x = at::randn({3});
  try {
    ops::stats_all_reduce_mean(x);
    ADD_FAILURE() << "an unregistered explicit group was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("group_name 'no-such-group' names no registered process group"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ops::_all_reduce_mean(x, "no-such-group"), c10::Error);
  ops::set_stats_sync({false, std::string("no-such-group")});
  EXPECT_TRUE(bitwise_equal(ops::stats_all_reduce_mean(x), x));
  // Statistics are floating point.
  ops::set_stats_sync({});
  EXPECT_THROW(ops::stats_all_reduce_mean(at::arange(3)), c10::Error);
}

// ---- the collective path ------------------------------------------------------------------------

class DoneWork : public c10d::Work {
 public:
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }
};

// Rank 0 of a two-rank group whose rank 1 contributes `other` to every sum- or max-all-reduce.
class OtherRankBackend : public c10d::Backend {
 public:
  explicit OtherRankBackend(at::Tensor other) : c10d::Backend(0, 2), other_(std::move(other)) {}
  const std::string getBackendName() const override { return "other_rank_test"; }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    ++calls;
    EXPECT_TRUE(opts.reduceOp == c10d::ReduceOp::SUM || opts.reduceOp == c10d::ReduceOp::MAX);
    EXPECT_EQ(tensors.size(), 1u);
    EXPECT_TRUE(tensors[0].is_contiguous());
    if (opts.reduceOp == c10d::ReduceOp::MAX) {
      tensors[0].copy_(at::maximum(tensors[0], other_));
    } else {
      tensors[0].add_(other_);
    }
    return c10::make_intrusive<DoneWork>();
  }
  int calls = 0;

 private:
  at::Tensor other_;
};

struct RegisteredGroup {
  RegisteredGroup(const std::string& name, const at::Tensor& other) : name(name) {
    backend = c10::make_intrusive<OtherRankBackend>(other);
    group = c10::make_intrusive<c10d::ProcessGroup>(0, 2);
    group->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::CUSTOM, backend);
    group->setDefaultBackend(c10d::ProcessGroup::BackendType::CUSTOM);
    c10d::register_process_group(name, group);
  }
  ~RegisteredGroup() { c10d::unregister_process_group(name); }
  std::string name;
  c10::intrusive_ptr<OtherRankBackend> backend;
  // The registry holds a weak reference, as for torch.distributed's groups: keep it alive.
  c10::intrusive_ptr<c10d::ProcessGroup> group;
};

TEST_F(StatsAllReduce, CollectiveForwardAndBackward) {
  const at::Tensor x0 = at::randn({3, 4}, at::kDouble), other = at::randn({3, 4}, at::kDouble);
  const RegisteredGroup group("brevitas_cpp_test_group", other);
  const at::Tensor expected = (x0 + other) / 2;
  // Explicit group, non-contiguous input.
  ops::set_stats_sync({true, group.name});
  at::Tensor x = test::leaf(x0.t().contiguous().t());
  const at::Tensor y = ops::stats_all_reduce_mean(x);
  EXPECT_TRUE(bitwise_equal(y.detach(), expected));
  EXPECT_EQ(group.backend->calls, 1);
  // d(sum(w * mean))/dx on rank 0 is (w_0 + w_1) / 2: rank 1's w is `other` here.
  const at::Tensor w = at::randn({3, 4}, at::kDouble);
  EXPECT_TRUE(bitwise_equal(test::grads(y, {x}, w)[0], (w + other) / 2));
  EXPECT_EQ(group.backend->calls, 2);
  // Disabled: a copy, no collective.
  ops::set_stats_sync({false, group.name});
  EXPECT_TRUE(bitwise_equal(ops::stats_all_reduce_mean(x0), x0));
  EXPECT_EQ(group.backend->calls, 2);
  // The collective op directly.
  EXPECT_TRUE(bitwise_equal(ops::_all_reduce_mean(x0, group.name), expected));
}

TEST_F(StatsAllReduce, MaximumOverRanksForTheInt8ActivationThreshold) {
  EXPECT_EQ(c10::str(c10::Dispatcher::singleton().findSchemaOrThrow("brevitas_cpp::_all_reduce_max", "").schema()),
            "brevitas_cpp::_all_reduce_max(Tensor x, str group_name) -> Tensor");
  const at::Tensor other = at::full({}, 5.0f);  // rank 1's max|x|
  const RegisteredGroup group("brevitas_cpp_test_group", other);
  EXPECT_TRUE(bitwise_equal(ops::_all_reduce_max(at::full({}, 2.0f), group.name), other));
  ops::set_stats_sync({true, group.name});
  at::Tensor threshold = at::zeros({}), iteration = at::zeros({}, at::kLong);
  const at::Tensor x = test::values({-2.0, 1.0});
  // Activations: the first batch's threshold is the maximum over the ranks, 5, not 2.
  ops::quantization_int8(x, threshold, iteration, 8, /*is_weight=*/false, std::nullopt, 0.01, 0, "ste", "minmax", true);
  EXPECT_TRUE(bitwise_equal(threshold, other));
  EXPECT_EQ(group.backend->calls, 2);
  // Weights are the same on every rank: no collective.
  ops::quantization_int8(x, threshold, iteration, 8, /*is_weight=*/true, std::nullopt, 0.01, 0, "ste", "minmax", true);
  EXPECT_TRUE(bitwise_equal(threshold, at::full({}, 2.0f)));
  EXPECT_EQ(group.backend->calls, 2);
}

TEST_F(StatsAllReduce, AutoModeUsesTheDefaultGroupOnceRegistered) {
  const at::Tensor x0 = at::randn({5}), other = at::randn({5});
  EXPECT_TRUE(bitwise_equal(ops::stats_all_reduce_mean(x0), x0));
  {
    const RegisteredGroup world(ops::kWorldGroupName, other);
    EXPECT_TRUE(bitwise_equal(ops::stats_all_reduce_mean(x0), (x0 + other) / 2));
    EXPECT_EQ(world.backend->calls, 1);
  }
  // Unregistered again (torch.distributed.destroy_process_group): a single process.
  EXPECT_TRUE(bitwise_equal(ops::stats_all_reduce_mean(x0), x0));
}

}  // namespace
}  // namespace brevitas_cpp
