"""brevitas_cpp.distributed in one process.

Without an initialised process group (or with a single rank) the statistics come back as an
exact copy with an identity gradient, so single-process numbers cannot change; the ops pass
torch.library.opcheck (schema, autograd registration, fake tensors, AOT autograd); the state
lives in C++ and the Python switches set it; and a TorchScript statistics block
(BREVITAS_JIT=1) now saves and loads, since it calls an op instead of a Python function."""

import io

import pytest
import torch
import torch.distributed as dist
from helpers import RecordedCalls

from brevitas_cpp import config, distributed
from brevitas_cpp.core.function_wrapper import OverTensorView
from brevitas_cpp.core.scaling import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.stats import _RuntimeStats
from brevitas_cpp.core.stats.stats_op import AbsMax

OPS = torch.ops.brevitas_cpp
needs_gloo = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)


@pytest.fixture(autouse=True)
def default_state():
    """Every test starts and ends with the default state: sync on, the default group (the
    C++ test checks that this is the state of a fresh process)."""
    OPS._set_stats_sync(True, None)
    yield
    OPS._set_stats_sync(True, None)


@pytest.fixture
def single_rank_group():
    """The default group of a one-rank gloo 'job' in this process (destroyed afterwards)."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def _inputs(layout: str, requires_grad: bool) -> torch.Tensor:
    x = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    if layout == "transposed":
        x = x.t()
    elif layout == "sliced":
        x = x[:, ::2]
    return x.requires_grad_(requires_grad)


# ---- all_reduce_stats without a process group ---------------------------------------------------


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_no_process_group_gives_an_exact_copy_with_identity_gradient(layout):
    assert not dist.is_initialized()
    stats = _inputs(layout, requires_grad=True)
    out = distributed.all_reduce_stats(stats)
    assert out is not stats and out.data_ptr() != stats.data_ptr()
    assert torch.equal(out, stats) and out.is_contiguous()
    weight = torch.randn(out.shape, dtype=out.dtype)
    (out * weight).sum().backward()
    assert torch.equal(stats.grad, weight)


def test_single_process_copy_skips_the_group_lookup():
    """Without torch.distributed and without a named group the copy is made in Python (no
    op call, whose failed group look-up throws); a named group still goes to the op, which
    refuses a name no live group has."""

    stats = torch.randn(3, 4).t()
    with RecordedCalls() as calls:
        out = distributed.all_reduce_stats(stats)
    assert not any("stats_all_reduce_mean" in n for n in calls.names)
    assert torch.equal(out, stats) and out.is_contiguous() and out.data_ptr() != stats.data_ptr()
    OPS._set_stats_sync(True, "no-such-group")
    with pytest.raises(RuntimeError, match="names no registered process group"):
        distributed.all_reduce_stats(stats)


def test_traced_and_compiled_calls_keep_the_op():
    """The Python shortcut is for eager calls only: a traced graph keeps the op (which decides
    on every run whether to reduce), and so does a compiled one."""
    traced = torch.jit.trace(lambda x: distributed.all_reduce_stats(x) * 2, torch.randn(3))
    assert "brevitas_cpp::stats_all_reduce_mean" in str(traced.graph)
    compiled = torch.compile(lambda x: distributed.all_reduce_stats(x) * 2, backend="eager")
    x = torch.randn(3)
    assert torch.equal(compiled(x), x * 2)
    OPS._set_stats_sync(True, "no-such-group")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="names no registered process group"):
        torch.compile(lambda x: distributed.all_reduce_stats(x) * 2, backend="eager")(x)


def test_every_float_dtype_bit_for_bit_and_empty():
    for dtype, bits in (
        (torch.float32, torch.int32),
        (torch.float64, torch.int64),
        (torch.float16, torch.int16),
        (torch.bfloat16, torch.int16),
    ):
        x = torch.tensor([-0.0, 1.5, float("nan"), float("inf")], dtype=dtype)
        out = distributed.all_reduce_stats(x)
        # The sign of -0.0 and the NaN payload included.
        assert out.dtype == dtype and torch.equal(out.view(bits), x.view(bits))
    assert distributed.all_reduce_stats(torch.empty(0, 3)).shape == (0, 3)


def test_non_floating_statistics_are_rejected():
    with pytest.raises(RuntimeError, match="stats_all_reduce_mean.*x"):
        distributed.all_reduce_stats(torch.arange(3))


def test_scripted_call_compiles_the_op_in():
    scripted = torch.jit.script(distributed.all_reduce_stats)
    assert "brevitas_cpp::stats_all_reduce_mean" in str(scripted.graph)
    x = torch.randn(5)
    assert torch.equal(scripted(x), x)


# ---- opcheck -------------------------------------------------------------------------------------


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_opcheck_stats_all_reduce_mean_single_process(layout, requires_grad):
    torch.library.opcheck(OPS.stats_all_reduce_mean, (_inputs(layout, requires_grad),))


@needs_gloo
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_opcheck_with_a_single_rank_group(single_rank_group, layout, requires_grad):
    name = single_rank_group.group_name
    torch.library.opcheck(OPS._all_reduce_mean, (_inputs(layout, requires_grad), name))
    torch.library.opcheck(OPS.stats_all_reduce_mean, (_inputs(layout, requires_grad),))


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_gradcheck_single_process(layout):
    # One process: the mean over one rank is x, so the gradient is the identity.
    x = _inputs(layout, requires_grad=True)
    assert torch.autograd.gradcheck(OPS.stats_all_reduce_mean, (x,))


@needs_gloo
def test_gradcheck_with_a_single_rank_group(single_rank_group):
    x = _inputs("transposed", requires_grad=True)
    name = single_rank_group.group_name
    assert torch.autograd.gradcheck(lambda x_: OPS._all_reduce_mean(x_, name), (x,))


@needs_gloo
def test_default_group_is_named_0_after_reinitialisation():
    """The op's auto mode resolves torch's name for the default group, "0"
    (distributed_c10d._process_group_name), also after destroy and a fresh init."""
    for _ in range(2):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            assert dist.group.WORLD.group_name == "0"
        finally:
            dist.destroy_process_group()


@needs_gloo
def test_single_rank_group_values(single_rank_group):
    x = _inputs("transposed", requires_grad=True)
    # The collective over one rank: the sum is x itself, divided by 1.
    out = OPS._all_reduce_mean(x, single_rank_group.group_name)
    assert torch.equal(out, x) and out.is_contiguous()
    out.backward(torch.full_like(out, 2.0))
    assert torch.equal(x.grad, torch.full_like(x, 2.0))
    # The public op skips the collective for one rank: a copy.
    assert torch.equal(distributed.all_reduce_stats(x), x)


# ---- the state and its Python switches -----------------------------------------------------------


def test_stats_sync_switches_and_restores():
    assert distributed.stats_sync_enabled()
    with distributed.stats_sync(False):
        assert not distributed.stats_sync_enabled()
        assert OPS._get_stats_sync() == (False, None)
        with distributed.stats_sync(True):
            assert distributed.stats_sync_enabled()
        assert not distributed.stats_sync_enabled()
    assert distributed.stats_sync_enabled()


def test_stats_sync_keeps_a_group_set_inside_the_block():
    with distributed.stats_sync(False):
        OPS._set_stats_sync(False, "7")
    assert OPS._get_stats_sync() == (True, "7")


def test_stats_sync_restores_after_an_error():
    with pytest.raises(KeyError):
        with distributed.stats_sync(False):
            raise KeyError("boom")
    assert distributed.stats_sync_enabled()


@pytest.mark.parametrize("bad", [0, 1, None, "no"])
def test_stats_sync_rejects_non_bool(bad):
    with pytest.raises(TypeError, match="stats_sync: enabled must be a bool"):
        with distributed.stats_sync(bad):
            pass


def test_set_stats_process_group_rejects_non_group():
    with pytest.raises(TypeError, match="group must be a torch.distributed.ProcessGroup or None"):
        distributed.set_stats_process_group("world")
    distributed.set_stats_process_group(None)  # the default, accepted
    assert OPS._get_stats_sync() == (True, None)


def test_set_stats_sync_rejects_an_empty_group_name():
    with pytest.raises(RuntimeError, match="group_name must be the name of a registered process"):
        OPS._set_stats_sync(True, "")


def test_disabled_sync_is_a_copy_even_with_an_unknown_group():
    OPS._set_stats_sync(True, "no-such-group")
    with pytest.raises(RuntimeError, match="'no-such-group' names no registered process group"):
        distributed.all_reduce_stats(torch.ones(2))
    with distributed.stats_sync(False):
        x = torch.randn(3)
        assert torch.equal(distributed.all_reduce_stats(x), x)


@needs_gloo
def test_set_stats_process_group_pushes_the_group_name(single_rank_group):
    group = dist.new_group([0])
    distributed.set_stats_process_group(group)
    assert OPS._get_stats_sync() == (True, group.group_name)
    assert group.group_name != single_rank_group.group_name
    x = torch.randn(3)
    assert torch.equal(distributed.all_reduce_stats(x), x)
    dist.destroy_process_group(group)
    # A destroyed explicit group is an error, not a silent single process.
    with pytest.raises(RuntimeError, match="names no registered process group"):
        distributed.all_reduce_stats(x)
    distributed.set_stats_process_group(None)
    assert torch.equal(distributed.all_reduce_stats(x), x)


# ---- blocks -------------------------------------------------------------------------------------


def test_runtime_stats_unchanged_in_one_process():
    # The hook sits in the training path of the (possibly scripted) block: same numbers as the
    # running average computed here by hand.
    block = _RuntimeStats(AbsMax(), (), OverTensorView(), 0.1, None, None)
    block.train()
    x0, x1 = torch.randn(4, 5), torch.randn(4, 5)
    assert torch.equal(block(x0), x0.abs().max())
    assert torch.equal(block(x1), x1.abs().max())
    expected = x0.abs().max() * (1 - 0.1) + 0.1 * x1.abs().max()
    assert torch.equal(block.running_stats, expected)


@pytest.mark.skipif(
    not config.JIT_ENABLED,
    reason="the core blocks are TorchScript modules only with BREVITAS_JIT=1",
)
@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.(save|load)` is deprecated:DeprecationWarning")
def test_scripted_stats_block_saves_and_loads():
    """Saving used to fail with 'Could not export Python function call' (the statistics
    average was a torch.jit.ignore'd Python function)."""

    def block() -> torch.nn.Module:
        return ParameterFromRuntimeStatsScaling(
            2, AbsMax(), scaling_stats_input_view_shape_impl=OverTensorView()
        ).train()

    eager = block()
    buffer = io.BytesIO()
    torch.jit.save(block(), buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    assert loaded.training
    gen = torch.Generator().manual_seed(5)
    # Warm-up (2 batches: the output is the batch statistic, differentiable in x through the
    # op), initialisation, then the learned value: same outputs and gradients.
    for step in range(4):
        x = torch.randn(3, 7, generator=gen)
        grads = []
        for module in (eager, loaded):
            xg = x.clone().requires_grad_()
            out = module(xg)
            grads.append(
                (out, *torch.autograd.grad(out.sum(), (xg, module.value), allow_unused=True))
            )
        (out_e, gx_e, gv_e), (out_l, gx_l, gv_l) = grads
        assert torch.equal(out_e, out_l)
        if step < 2:
            assert torch.equal(gx_e, gx_l) and gx_e.abs().sum() > 0
        else:
            assert torch.equal(gv_e, gv_l)
    assert torch.equal(eager.value, loaded.value)
