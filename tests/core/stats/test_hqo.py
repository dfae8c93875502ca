"""Half-quadratic optimization (core/stats/hqo.py) against the algorithm written out here on plain
tensors (the numbers against Brevitas are tests/quant/golden: the ...HQO cases)."""

import pytest
import torch

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as quant
from brevitas_cpp.core.stats import HalfQuadraticOptimizerScale
from brevitas_cpp.core.stats.hqo import masked_median, shrink_lp_op


def test_shrink_and_masked_median_formulas() -> None:
    e = torch.tensor([-2.0, -0.5, 0.0, 0.25, 3.0])
    beta, p = 4.0, 0.5
    want = torch.sign(e) * torch.clamp(e.abs() - e.abs() ** (p - 1) / beta, min=0.0)
    assert torch.equal(shrink_lp_op(e, beta, p), want)
    assert torch.equal(shrink_lp_op(e, beta, 1), torch.sign(e) * torch.clamp(e.abs() - 0.25, min=0))
    x = torch.tensor([[5.0, 1.0, 3.0, 100.0], [2.0, 4.0, 6.0, 8.0]])
    mask = torch.tensor([[True, True, True, False], [False, True, True, True]])
    # torch's median of an even count is the lower middle value.
    assert torch.equal(masked_median(x, mask, dim=1, keepdim=True), torch.tensor([[3.0], [6.0]]))
    assert masked_median(x, mask).item() == 4.0


def reference_symmetric_scale(w: torch.Tensor, iters: int = 1000) -> torch.Tensor:
    """HQO of a per-tensor narrow-int8 scale, written out: the statistic c (scale = c / 127)
    starts at max|w|; each iteration scores mean|q - w|, stops when it does not improve, shrinks
    the error (l_0.7, beta from 1e5, x1.01 a step) and takes the median of (w - W_e) / ints."""
    c = w.abs().max()
    best, best_loss, beta = c, torch.tensor(float("inf")), 1e5
    for _ in range(iters):
        scale = c / 127.0
        ints = torch.clamp(torch.round(w / scale), -127, 127)
        q = ints * scale
        loss = (q - w).abs().mean()
        if loss >= best_loss:
            break
        best, best_loss = c, loss
        e = w - q
        shrunk = torch.sign(e) * torch.relu(e.abs() - e.abs() ** (0.7 - 1) / beta)
        num, den = (w - shrunk).flatten(), ints.flatten()
        keep = (num != 0) & (den != 0)
        c = (num[keep] / den[keep]).median() * 127.0
        beta *= 1.01
    return best


def test_symmetric_weight_scale_is_the_written_out_search() -> None:
    torch.manual_seed(0)
    layer = qnn.QuantLinear(48, 8, bias=False, weight_quant=quant.Int8WeightPerTensorFloatHQO)
    qt = layer.quant_weight()
    want = reference_symmetric_scale(layer.weight.detach())
    torch.testing.assert_close(qt.scale, want / 127.0, rtol=1e-6, atol=0.0)
    # The search improves on max|w| / 127.
    w = layer.weight.detach()
    plain = torch.clamp(torch.round(w / (w.abs().max() / 127)), -127, 127) * (w.abs().max() / 127)
    assert (qt.value - w).abs().mean() <= (plain - w).abs().mean()


def test_per_channel_zero_points_of_a_convolution_equal_the_flattened_linear() -> None:
    """Brevitas 0.12 fails on this quantizer in a convolution; here each output channel's zero
    point is found as for the same weights laid out as a linear layer's rows."""
    torch.manual_seed(1)
    q = quant.ShiftedUint8WeightPerChannelFloatHQO
    conv = qnn.QuantConv2d(16, 4, 3, bias=False, weight_quant=q)
    linear = qnn.QuantLinear(144, 4, bias=False, weight_quant=q)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.view(4, 144))
    a, b = conv.quant_weight(), linear.quant_weight()
    assert torch.equal(a.zero_point.flatten(), b.zero_point.flatten())
    assert torch.equal(a.value.view(4, 144), b.value)


def test_activation_zero_point_search_runs_over_the_warm_up() -> None:
    torch.manual_seed(2)
    act = qnn.QuantIdentity(
        act_quant=quant.ShiftedUint8ActPerTensorFloatHQO.let(collect_stats_steps=3),
        return_quant_tensor=True,
    )
    act.train()
    for _ in range(5):
        out = act(torch.randn(4, 16))
    assert bool(torch.isfinite(out.zero_point).all())
    act.eval()
    x = torch.randn(4, 16)
    y = act(x)
    ints = torch.clamp(torch.round(x / y.scale + y.zero_point), 0, 255)
    assert torch.equal(y.value, (ints - y.zero_point) * y.scale)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hqo_iters_scale": 0}, "hqo_iters_scale must be an int >= 1"),
        ({"hqo_beta_scale": -1.0}, "hqo_beta_scale must be a positive number"),
        ({"hqo_lp_norm_scale": "0.7"}, "hqo_lp_norm_scale must be a positive number"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        qnn.QuantLinear(8, 4, weight_quant=quant.Int8WeightPerTensorFloatHQO.let(**kwargs))


def test_block_needs_its_proxy() -> None:
    with pytest.raises(TypeError, match="proxy_module must be the quant proxy"):
        HalfQuadraticOptimizerScale(
            None,
            torch.nn.Identity(),
            False,
            torch.nn.Identity(),
            int_scaling_impl=torch.nn.Identity(),
            bit_width_impl=torch.nn.Identity(),
        )


def test_script_and_compile_after_the_search_match_eager() -> None:
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        qnn.QuantLinear(16, 8, weight_quant=quant.Int8WeightPerChannelFloatHQO),
        qnn.QuantReLU(),
        qnn.QuantLinear(
            8,
            4,
            weight_quant=quant.ShiftedUint8WeightPerTensorFloatHQO,
            input_quant=quant.ShiftedUint8ActPerTensorFloatHQO.let(collect_stats_steps=2),
        ),
    )
    model.train()
    for _ in range(3):  # the weight searches, then the activation's warm-up and its search
        model(torch.randn(5, 16)).sum().backward()
    x = torch.randn(5, 16)
    model.eval()
    want = model(x)
    assert torch.equal(torch.jit.script(model)(x), want)
    assert torch.equal(torch.compile(model, backend="eager")(x), want)
