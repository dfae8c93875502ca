"""_Stats, _ParameterListStats and _RuntimeStats: reshaping, concatenation order of tracked
parameters, running statistics (EMA and cumulative), state_dict behaviour and bad input."""

import pytest
import torch
from helpers import brevitas_format, rand
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import (
    Identity,
    OverBatchOverTensorView,
    OverOutputChannelView,
    OverTensorView,
)
from brevitas_cpp.core.stats import (
    DEFAULT_MOMENTUM,
    SCALAR_SHAPE,
    AbsAve,
    AbsMax,
    _ParameterListStats,
    _RuntimeStats,
    _Stats,
)


def test_constants():
    assert DEFAULT_MOMENTUM == 0.1
    assert SCALAR_SHAPE == ()


# ---- _Stats --------------------------------------------------------------------------------------


def test_stats_reshapes_result():
    x = torch.tensor([[-3.0, 1.0], [0.5, 2.0]])
    assert torch.equal(_Stats(AbsMax(), SCALAR_SHAPE)(x), torch.tensor(3.0))
    assert torch.equal(_Stats(AbsMax(), (1,))(x), torch.tensor([3.0]))
    assert torch.equal(_Stats(AbsMax(1), (2, 1, 1))(x), torch.tensor([[[3.0]], [[2.0]]]))
    # A list shape is accepted and stored as a tuple (TorchScript constants are tuples).
    assert _Stats(AbsMax(1), [2, 1]).stats_output_shape == (2, 1)


# ---- _ParameterListStats -------------------------------------------------------------------------


class Layer(nn.Module):
    """A layer owning its weights, with statistics tracking them (as a quantized layer does)."""

    def __init__(self, n_params: int, force_parameter: bool = False):
        super().__init__()
        self.weights = nn.ParameterList(
            [nn.Parameter(rand((2, k + 1), seed=k)) for k in range(n_params)]
        )
        total = sum(k + 1 for k in range(n_params))
        self.stats = _ParameterListStats(
            Identity(), (2, total), OverOutputChannelView(), 1, list(self.weights), force_parameter
        )


def test_single_parameter_is_passed_in():
    layer = Layer(1)
    w = layer.weights[0]
    assert torch.equal(layer.stats(w), w)
    # The stats block does not hold the weight; the caller must pass it.
    # Under TorchScript the error surfaces as torch.jit.Error, which is not a RuntimeError.
    with pytest.raises(
        (RuntimeError, torch.jit.Error), match="_ViewParameter: the input cannot be None"
    ):
        layer.stats(None)


def test_forced_single_parameter_is_held():
    layer = Layer(1, force_parameter=True)
    w = layer.weights[0]
    assert torch.equal(layer.stats(None), w)
    other = rand((2, 1), seed=9)
    assert torch.equal(layer.stats(other), other)  # an explicit input still wins


def test_several_parameters_concatenate_latest_first():
    layer = Layer(3)
    w0, w1, w2 = layer.weights
    # Each later parameter is put in front of what was gathered: [w2, w1, w0].
    assert torch.equal(layer.stats(), torch.cat([w2, w1, w0], dim=1))


def test_parameter_list_stats_values_and_gradients():
    weights = [nn.Parameter(rand((3, 4), seed=1)), nn.Parameter(rand((3, 2), seed=2))]
    stats = _ParameterListStats(AbsAve(1), (3, 1), OverOutputChannelView(), 1, weights)
    out = stats()
    ref_in = [w.detach().clone().requires_grad_() for w in weights]
    ref = torch.cat([ref_in[1], ref_in[0]], dim=1).abs().mean(dim=1).view(3, 1)
    assert torch.equal(out, ref)
    g = torch.arange(1.0, 4.0).view(3, 1)
    out.backward(g)
    ref.backward(g)
    for w, r in zip(weights, ref_in):
        assert torch.equal(w.grad, r.grad)


def test_tracked_parameters_stay_out_of_state_dict():
    layer = Layer(3)
    assert list(layer.state_dict()) == ["weights.0", "weights.1", "weights.2"]
    # Each weight is listed once, under its owner.
    assert [n for n, _ in layer.named_parameters()] == ["weights.0", "weights.1", "weights.2"]
    fresh = Layer(3)
    result = fresh.load_state_dict(layer.state_dict(), strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    # The stats block tracks the loaded weights (same Parameter objects, updated in place).
    w0, w1, w2 = layer.weights
    assert torch.equal(fresh.stats(), torch.cat([w2, w1, w0], dim=1))


def test_full_state_dict_switch_saves_tracked_parameters(monkeypatch):
    monkeypatch.setattr(config, "_FULL_STATE_DICT", True, raising=False)
    keys = list(Layer(2).state_dict())
    assert "stats.first_tracked_param.parameter" in keys
    assert "stats.extra_tracked_params_list.0.parameter" in keys


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            dict(tracked_parameter_list=[]),
            ValueError,
            r"_ParameterListStats: tracked_parameter_list must be a non-empty list",
        ),
        (
            dict(stats_input_concat_dim=1.0),
            TypeError,
            r"_ParameterListStats: stats_input_concat_dim must be an int \(or None for a single "
            r"parameter\), got 1.0",
        ),
        (
            dict(stats_output_shape=(2.0, 1)),
            TypeError,
            r"_ParameterListStats: stats_output_shape must be a tuple of ints|_Stats: stats_output_shape",
        ),
        (dict(stats_impl="absmax"), TypeError, r"_Stats: stats_impl must be a torch.nn.Module"),
    ],
)
def test_parameter_list_stats_bad_input(kwargs, error, match):
    args = dict(
        stats_impl=AbsMax(),
        stats_output_shape=(),
        stats_input_view_shape_impl=OverTensorView(),
        stats_input_concat_dim=0,
        tracked_parameter_list=[nn.Parameter(torch.ones(2))],
    )
    args.update(kwargs)
    with pytest.raises(error, match=match):
        _ParameterListStats(**args)


# ---- _RuntimeStats -------------------------------------------------------------------------------


def _runtime(momentum, dtype=None):
    # Per batch item absmax over [N, rest]: statistics of shape (1, N) after the view.
    return _RuntimeStats(AbsMax(1), (1, 3), OverBatchOverTensorView(), momentum, dtype, None)


def _batches():
    return [rand((3, 2, 4), seed=s, spread=1.0 + s) for s in range(4)]


def test_runtime_stats_exponential_moving_average():
    block = _runtime(0.1)
    running = None
    for x in _batches():
        out = block(x)
        stats = x.reshape(3, -1).abs().amax(dim=1).view(1, 3)
        assert torch.equal(out, stats)  # training returns the current batch's statistics
        running = stats.clone() if running is None else running * (1 - 0.1) + 0.1 * stats
        assert torch.equal(block.running_stats, running)
    assert block.counter == 4
    block.eval()
    assert torch.equal(block(torch.zeros(3, 8)), running)
    assert block.counter == 4  # eval leaves the running statistics alone


def test_runtime_stats_cumulative_average():
    block = _runtime(None)
    running = None
    for i, x in enumerate(_batches()):
        block(x)
        stats = x.reshape(3, -1).abs().amax(dim=1).view(1, 3)
        running = stats.clone() if running is None else running * (i / (i + 1)) + stats / (i + 1)
        assert torch.equal(block.running_stats, running)


def test_runtime_stats_gradient_flows_in_training():
    block = _runtime(0.1)
    x = rand((3, 5), seed=3).requires_grad_()
    ref_x = x.detach().clone().requires_grad_()
    g = torch.tensor([[1.0, 2.0, 3.0]])
    block(x).backward(g)
    ref_x.abs().amax(dim=1).view(1, 3).backward(g)
    assert torch.equal(x.grad, ref_x.grad)
    assert not block.running_stats.requires_grad


def test_runtime_stats_state_dict_round_trip(monkeypatch):
    block = _runtime(0.1)
    for x in _batches():
        block(x)
    state = block.state_dict()
    assert list(state) == ["running_stats"]
    fresh = _runtime(0.1)
    assert fresh.load_state_dict(state, strict=True).missing_keys == []
    fresh.eval()
    assert torch.equal(fresh(torch.zeros(3, 1)), block.running_stats)
    # The counter comes back too: the next batch is weighed as in the saved block.
    assert fresh.counter == block.counter
    fresh.train()
    x = _batches()[0]
    assert torch.equal(fresh(x), block(x))
    # Missing statistics are an error in a checkpoint with the block (as in Brevitas) unless
    # IGNORE_MISSING_KEYS; a checkpoint without the block (a float model's) is complete.
    assert _runtime(0.1).load_state_dict({}, strict=True).missing_keys == []
    brevitas_empty = brevitas_format({})
    assert _runtime(0.1).load_state_dict(brevitas_empty, strict=False).missing_keys == [
        "running_stats"
    ]
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert _runtime(0.1).load_state_dict(brevitas_empty, strict=True).missing_keys == []


def test_runtime_stats_dtype_and_initial_value():
    block = _runtime(0.1, dtype=torch.float64)
    assert block.running_stats.dtype == torch.float64
    assert torch.equal(block.running_stats, torch.ones(1, 3, dtype=torch.float64))


@pytest.mark.parametrize("momentum", [1.5, -0.1, float("nan"), "0.1", True])
def test_runtime_stats_bad_momentum(momentum):
    with pytest.raises(
        ValueError, match=r"_RuntimeStats: stats_buffer_momentum must be None .* got"
    ):
        _runtime(momentum)


def test_blocks_follow_jit_switch():
    blocks = [_Stats(AbsMax(), ()), _runtime(0.1), Layer(1).stats, Layer(2).stats]
    for block in blocks:
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
