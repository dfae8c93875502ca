"""MSE search: the scales and zero points it picks against brute force written out here (the
squared quantization error of every grid candidate, or of a fine grid for the Fibonacci search),
local-loss and observer modes, argument errors, and the search in TorchScript blocks
(BREVITAS_JIT=1), under torch.jit.script of a layer and under torch.compile. Brevitas's own
numbers for the stock MSE quantizers are in tests/quant/golden."""

import io

import pytest
import torch
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import OverTensorView
from brevitas_cpp.core.stats import MSE, AbsMax, AbsMinMax, NegativeMinOrZero
from brevitas_cpp.core.zero_point import (
    ParameterFromRuntimeZeroPoint,
    ParameterFromStatsFromParameterZeroPoint,
    ZeroZeroPoint,
)
from brevitas_cpp.inject.injector import MissingDependencyError
from brevitas_cpp.nn import QuantIdentity, QuantLinear
from brevitas_cpp.quant import (
    Int8ActPerTensorFloatMSE,
    Int8WeightPerChannelFloatMSE,
    Int8WeightPerTensorFloatMSE,
    ShiftedUint8ActPerTensorFloatMSE,
    ShiftedUint8WeightPerTensorFloatMSE,
)
from brevitas_cpp.quant.base import MSESymmetricScaleSubInjector

ITERS = 20  # Brevitas's default mse_iters
FIB_20 = 6765  # F_20: the Fibonacci search shrinks its bracket by this factor


def int_quant(x, scale, zero_point, lo, hi):
    """(clamp(round(x / s + z), lo, hi) - z) * s, round half to even."""
    return (torch.clamp(torch.round(x / scale + zero_point), lo, hi) - zero_point) * scale


def grid_pick(init, loss_of):
    """Brute force of the grid search: the first of (init / 20) * i, i = 2..20, with the least
    loss_of(candidate) (per element of init for per-channel searches)."""
    best_c, best_loss = None, None
    for i in range(2, ITERS + 1):
        c = (init / ITERS) * i
        loss = loss_of(c)
        if best_c is None:
            best_c, best_loss = c, loss
        else:
            better = loss < best_loss
            best_c = torch.where(better, c, best_c)
            best_loss = torch.where(better, loss, best_loss)
    return best_c


def symmetric_loss(w, c, n, dim=None):
    """Squared error of narrow signed quantization with scale c / n (summed per row with dim)."""
    err = (w - int_quant(w, c / n, 0.0, -n, n)) ** 2
    return err.sum() if dim is None else err.sum(dim)


# ---- the blocks the mixins build -------------------------------------------------------------------


def _mse_blocks(module):
    return [m for m in module.modules() if hasattr(m, "search_key")]


@pytest.mark.parametrize(
    "quant, init_ops, zero_point_impl",
    [
        (Int8WeightPerChannelFloatMSE, [AbsMax], ZeroZeroPoint),
        (
            ShiftedUint8WeightPerTensorFloatMSE,
            [AbsMinMax, NegativeMinOrZero],
            ParameterFromStatsFromParameterZeroPoint,
        ),
        (
            ShiftedUint8ActPerTensorFloatMSE,
            [AbsMinMax, NegativeMinOrZero],
            ParameterFromRuntimeZeroPoint,
        ),
    ],
)
def test_mixins_build_brevitas_blocks(quant, init_ops, zero_point_impl):
    if quant is ShiftedUint8ActPerTensorFloatMSE:
        # Brevitas 0.12 needs dtype/device here; brevitas_cpp builds it without.
        proxy = QuantIdentity(act_quant=quant).act_quant
        tensor_quant = proxy.fused_activation_quant_proxy.tensor_quant
    else:
        proxy = QuantLinear(4, 3, bias=False, weight_quant=quant).weight_quant
        tensor_quant = proxy.tensor_quant
    assert type(tensor_quant.zero_point_impl) is zero_point_impl
    blocks = _mse_blocks(tensor_quant)
    assert [type(b.mse_init_op) for b in blocks] == init_ops  # the scale's, then the zero point's
    for block in blocks:
        assert type(block) is MSE or config.JIT_ENABLED  # scripted around under BREVITAS_JIT=1
        assert block.search_method == "grid" and block.num == ITERS
        assert block._search.proxy_module is proxy
    assert _mse_blocks(proxy) == blocks  # reached from the proxy: a search can switch them


# ---- the search against brute force -------------------------------------------------------------


def test_grid_per_tensor_weight_picks_the_best_candidate():
    torch.manual_seed(0)
    layer = QuantLinear(16, 8, bias=False, weight_quant=Int8WeightPerTensorFloatMSE)
    w = layer.weight.detach()
    best = grid_pick(w.abs().max(), lambda c: symmetric_loss(w, c, 127.0))
    assert torch.equal(layer.quant_weight().scale.detach(), best / 127.0)


def test_grid_per_channel_weight_picks_each_channels_best_candidate():
    torch.manual_seed(1)
    layer = QuantLinear(16, 6, bias=False, weight_quant=Int8WeightPerChannelFloatMSE)
    with torch.no_grad():
        layer.weight[2] *= 0.01  # channels of very different ranges
        layer.weight[4, 0] = 3.0  # an outlier
    w = layer.weight.detach()
    best = grid_pick(w.abs().amax(dim=1), lambda c: symmetric_loss(w, c[:, None], 127.0, 1))
    scale = layer.quant_weight().scale.detach()
    assert scale.shape == (6, 1)
    assert torch.equal(scale, (best / 127.0)[:, None])


def test_grid_shifted_weight_searches_the_scale_then_the_zero_point():
    torch.manual_seed(2)
    layer = QuantLinear(32, 4, bias=False, weight_quant=ShiftedUint8WeightPerTensorFloatMSE)
    with torch.no_grad():
        layer.weight.add_(0.05)  # an asymmetric range
    w = layer.weight.detach()
    lo = torch.clamp(w.min(), max=0.0)

    def zero_point_of(neg_min, s):
        return torch.clamp(torch.round(-neg_min / s), 0.0, 255.0)

    # The scale first, with the zero point at its initial statistic min(w, 0).
    def scale_loss(c):
        s = c / 255.0
        return ((w - int_quant(w, s, zero_point_of(lo, s), 0.0, 255.0)) ** 2).sum()

    s = grid_pick(torch.abs(w.max() - lo), scale_loss) / 255.0

    # Then the zero point, with that scale.
    def zero_point_loss(m):
        return ((w - int_quant(w, s, zero_point_of(m, s), 0.0, 255.0)) ** 2).sum()

    z = zero_point_of(grid_pick(lo, zero_point_loss), s)
    qw = layer.quant_weight()
    assert torch.equal(qw.scale.detach(), s) and torch.equal(qw.zero_point.detach(), z)


def test_grid_activation_scale_of_the_first_batch():
    torch.manual_seed(3)
    act = QuantIdentity(act_quant=Int8ActPerTensorFloatMSE, return_quant_tensor=True)
    x = torch.randn(4, 64)
    x[0, 0] = 8.0
    # Signed, not narrow: [-128, 127], and the scale is the clipping range over 128 (-min_int).
    best = grid_pick(
        x.abs().max(), lambda c: ((x - int_quant(x, c / 128.0, 0.0, -128, 127)) ** 2).sum()
    )
    assert torch.equal(act(x).scale.detach(), best / 128.0)


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_fibonacci_is_within_its_bracket_of_the_fine_grid_optimum(bits):
    torch.manual_seed(bits)

    class Quant(Int8WeightPerTensorFloatMSE):
        bit_width = bits
        mse_scale = MSESymmetricScaleSubInjector.let(mse_search_method="fibonacci")

    layer = QuantLinear(64, 64, bias=False, weight_quant=Quant)
    n = 2.0 ** (bits - 1) - 1
    w = layer.weight.detach().double()
    c_fib = layer.quant_weight().scale.detach().double() * n
    init = float(w.abs().max())
    # The fine grid: the candidate with the least squared error, in steps of init / 20000.
    fine = torch.linspace(init / ITERS, init, 19001, dtype=torch.float64)
    losses = torch.stack([symmetric_loss(w, c, n) for c in fine])
    c_best = fine[losses.argmin()]
    bracket = (init - init / ITERS) / FIB_20 + (fine[1] - fine[0])
    assert abs(float(c_fib) - float(c_best)) <= bracket
    assert float(symmetric_loss(w, c_fib, n)) <= float(losses.min()) * (1 + 1e-4)


# ---- modes -------------------------------------------------------------------------------------


def test_local_loss_mode_returns_the_candidate_without_searching():
    torch.manual_seed(4)
    layer = QuantLinear(8, 4, bias=False, weight_quant=Int8WeightPerTensorFloatMSE)
    (mse,) = _mse_blocks(layer.weight_quant)
    mse.local_loss_mode = True
    scale = layer.quant_weight().scale.detach()
    # No candidate yet: the init statistic max|w| itself.
    assert torch.equal(scale, layer.weight.detach().abs().max() / 127.0)


def test_observer_mode_is_off_during_the_search_and_restored_after():
    torch.manual_seed(5)
    ref = QuantLinear(8, 4, bias=False, weight_quant=Int8WeightPerTensorFloatMSE)
    layer = QuantLinear(8, 4, bias=False, weight_quant=Int8WeightPerTensorFloatMSE)
    layer.load_state_dict(ref.state_dict())
    tensor_quant = layer.weight_quant.tensor_quant
    tensor_quant.observer_only = True
    out = tensor_quant(layer.weight)
    assert torch.equal(out[0], layer.weight)  # the observer passes the weight through
    assert tensor_quant.observer_only
    # The candidates were scored on quantized outputs: the scale is the one found without it.
    assert torch.equal(out[1], ref.quant_weight().scale)


def test_candidates_are_searched_once_for_weights():
    torch.manual_seed(6)
    layer = QuantLinear(8, 4, bias=False, weight_quant=Int8WeightPerTensorFloatMSE)
    first = layer.quant_weight().scale.detach()
    with torch.no_grad():
        layer.weight.mul_(10.0)
    # The scale is learned from then on: a new weight does not start a new search.
    assert torch.equal(layer.quant_weight().scale.detach(), first)


# ---- errors ----------------------------------------------------------------------------------------


def _mse(**kwargs):
    args = dict(
        proxy_module=nn.Identity(),
        mse_init_op=AbsMax(),
        inner_stats_input_view_shape_impl=OverTensorView(),
    )
    args.update(kwargs)
    return MSE(**args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mse_search_method": "golden"}, "mse_search_method='golden'.*'fibonacci', 'grid'"),
        ({"mse_search_method": "Grid"}, "mse_search_method='Grid'.*'fibonacci', 'grid'"),
        ({"mse_search_method": "grid", "mse_iters": 0}, "mse_iters must be an int >= 1"),
        ({"mse_iters": 1}, "mse_iters must be an int >= 2 with mse_search_method='fibonacci'"),
        ({"mse_iters": 2.5}, "mse_iters must be an int"),
        ({"mse_iters": True}, "mse_iters must be an int"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _mse(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"proxy_module": None}, "proxy_module must be the quant proxy"),
        ({"mse_init_op": "max"}, "mse_init_op must be a torch.nn.Module"),
        ({"inner_stats_input_view_shape_impl": None}, "inner_stats_input_view_shape_impl must"),
        ({"stats_reduce_dim": 1.0}, "stats_reduce_dim must be an int or None"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, match):
    with pytest.raises(TypeError, match=match):
        _mse(**kwargs)


def test_a_bad_search_method_on_a_quantizer_is_refused_when_built():
    class Quant(Int8WeightPerTensorFloatMSE):
        mse_scale = MSESymmetricScaleSubInjector.let(mse_search_method="bisection")

    with pytest.raises(ValueError, match="mse_search_method='bisection'"):
        QuantLinear(4, 4, bias=False, weight_quant=Quant)


def test_without_a_proxy_the_missing_setting_is_named():
    layer = nn.Linear(4, 4)
    quant = Int8WeightPerTensorFloatMSE.let(module=layer, tracked_parameter_list=[layer.weight])
    with pytest.raises(MissingDependencyError, match="proxy_module"):
        quant.tensor_quant


# ---- TorchScript and torch.compile -----------------------------------------------------------------


def _model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(
        QuantIdentity(act_quant=Int8ActPerTensorFloatMSE, collect_stats_steps=2),
        QuantLinear(8, 4, bias=False, weight_quant=Int8WeightPerChannelFloatMSE),
    )


def _calibrated(seed, x):
    model = _model(seed)
    for _ in range(3):  # two searches, then the learned scale
        model(x)
    return model


def test_blocks_are_scripted_around_the_search_under_jit():
    tq = _model(7)[1].weight_quant.tensor_quant
    assert isinstance(tq, torch.jit.ScriptModule) == config.JIT_ENABLED
    assert len(_mse_blocks(tq)) == 1


def test_torch_jit_script_after_calibration_matches_eager_and_saves():
    x = torch.randn(3, 8)
    eager = _calibrated(8, x)
    scripted = torch.jit.script(_calibrated(8, x))
    assert torch.equal(scripted(x), eager(x))
    if config.JIT_ENABLED:
        # The compiled MSE blocks call the search back in Python: not exportable.
        with pytest.raises(RuntimeError, match="_search_forward_in_python"):
            torch.jit.save(scripted, io.BytesIO())
    else:
        buffer = io.BytesIO()
        torch.jit.save(scripted, buffer)
        buffer.seek(0)
        assert torch.equal(torch.jit.load(buffer)(x), eager(x))


@pytest.mark.skipif(config.JIT_ENABLED, reason="under BREVITAS_JIT=1 the search calls back")
def test_torch_jit_script_before_calibration_refuses_to_search():
    scripted = torch.jit.script(_model(9))
    # A raise in TorchScript reaches Python as torch.jit.Error.
    with pytest.raises(torch.jit.Error, match="can not run in a torch.jit.script'ed model"):
        scripted(torch.randn(3, 8))


@pytest.mark.skipif(not config.JIT_ENABLED, reason="the callback of BREVITAS_JIT=1")
def test_torch_jit_script_before_calibration_searches_in_python_under_jit():
    x = torch.randn(3, 8)
    eager, scripted = _model(9), torch.jit.script(_model(9))
    for _ in range(3):
        assert torch.equal(scripted(x), eager(x))


def test_torch_compile_matches_eager():
    x = torch.randn(3, 8)
    eager, twin = _model(10), _model(10)
    # Before calibration the searches run eagerly (graph breaks), then the graph is whole.
    compiled = torch.compile(twin, backend="aot_eager")
    for _ in range(4):
        assert torch.equal(compiled(x), eager(x))
    fullgraph = torch.compile(twin, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    y_eager, y_compiled = eager(x), fullgraph(x)
    assert torch.equal(y_compiled, y_eager)
    y_eager.sum().backward()
    y_compiled.sum().backward()
    for a, b in zip(eager.parameters(), twin.parameters()):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad)
