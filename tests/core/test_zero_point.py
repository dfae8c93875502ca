"""Zero-point blocks against Brevitas's formulas spelled out with plain torch ops: a float zero
point z enters the integer domain as z / scale + min_int, rounded and clamped to the integer
range when quantize_zero_point."""

from typing import List, Optional

import pytest
import torch
from core_refs import (
    assert_grad_close,
    assert_scripted,
    backward_same,
    ref_momentum_update,
    ste,
)
from helpers import brevitas_format
from torch import Tensor

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper import (
    DynamicOverSubChannelBlockView,
    OverOutputChannelView,
    OverTensorView,
)
from brevitas_cpp.core.stats import NegativeMinOrZero
from brevitas_cpp.core.zero_point import (
    ParameterFromRuntimeZeroPoint,
    ParameterFromStatsFromParameterZeroPoint,
    ParameterZeroPoint,
    RuntimeDynamicGroupZeroPoint,
    StatsFromParameterZeroPoint,
    ZeroZeroPoint,
    _ScaleShiftQuantZeroPoint,
    _ScaleShiftZeroPoint,
)

# ---- test doubles and written-out references ------------------------------------------------------


class RefIntQuant(jit.ScriptModule):
    """Stand-in for the injected int_quant: Brevitas's to_int / min_int in plain torch ops."""

    __constants__ = ["signed", "narrow_range"]

    def __init__(self, signed: bool, narrow_range: bool = False) -> None:
        super().__init__()
        self.signed = signed
        self.narrow_range = narrow_range

    @jit.script_method
    def min_int(self, bit_width: Tensor) -> Tensor:
        if self.signed:
            low = -(2.0 ** (bit_width - 1))
            return low + 1.0 if self.narrow_range else low
        return 0.0 * bit_width

    @jit.script_method
    def max_int(self, bit_width: Tensor) -> Tensor:
        if self.signed:
            return 2.0 ** (bit_width - 1) - 1.0
        return 2.0**bit_width - 2.0 if self.narrow_range else 2.0**bit_width - 1.0

    @jit.script_method
    def to_int(self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor) -> Tensor:
        y = x / scale + zero_point
        y = y + (torch.round(y) - y).detach()
        high = self.max_int(bit_width)
        low = self.min_int(bit_width)
        y = torch.where(y > high, high, y)
        return torch.where(y < low, low, y)


def abs_sign_grad(x: Tensor) -> Tensor:
    """|x| with gradient sign(x), sign(0) = +1."""
    signed = x * torch.where(x >= 0, 1.0, -1.0).to(x.dtype)
    return torch.abs(x).detach() + (signed - signed.detach())


def ref_min_int(signed: bool, bit_width: Tensor) -> Tensor:
    return -(2.0 ** (bit_width - 1)) if signed else 0.0 * bit_width


def ref_max_int(signed: bool, bit_width: Tensor) -> Tensor:
    return 2.0 ** (bit_width - 1) - 1.0 if signed else 2.0**bit_width - 1.0


def ref_scale_shift(
    z: Tensor, scale: Tensor, bit_width: Tensor, signed: bool, quantize: bool
) -> Tensor:
    low = ref_min_int(signed, bit_width)
    y = z / scale + low
    if not quantize:
        return y
    y = ste(torch.round(y), y)
    high = ref_max_int(signed, bit_width)
    y = torch.where(y > high, high, y)
    return torch.where(y < low, low, y)


class NegativeMinOverTensor(jit.ScriptModule):
    """min(x) where it is <= 0, else 0."""

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        m = torch.min(x)
        return torch.where(m <= 0.0, m, torch.zeros_like(m))


class NegativeMinOverDim1(jit.ScriptModule):
    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        m = torch.min(x, dim=1)[0]
        return torch.where(m <= 0.0, m, torch.zeros_like(m))


def ref_negative_min(x: Tensor, per_channel: bool, channel_dim: int = 0) -> Tensor:
    if per_channel:
        moved = x.movedim(channel_dim, 0)
        m = moved.reshape(moved.shape[0], -1).min(dim=1)[0]
        shape = [1] * x.dim()
        shape[channel_dim] = x.shape[channel_dim]
        return torch.where(m <= 0.0, m, torch.zeros_like(m)).view(shape)
    m = x.min()
    return torch.where(m <= 0.0, m, torch.zeros_like(m))


def weight() -> Tensor:
    g = torch.Generator().manual_seed(17)
    w = torch.randn(4, 3, 2, generator=g) * 0.3
    w[2] = w[2].abs() + 0.1  # a channel without negative values: statistic 0
    return w


SCALE, BIT_WIDTH = torch.tensor(0.05), torch.tensor(4.0)
PER_CHANNEL_SCALE = torch.tensor([0.05, 0.02, 0.1, 0.03]).view(4, 1, 1)
QUANTIZE = pytest.mark.parametrize("quantize", [False, True], ids=["float_zp", "quantized_zp"])
SIGNED = pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])


# ---- ZeroZeroPoint, _ScaleShiftZeroPoint -----------------------------------------------------------


def test_zero_zero_point():
    block = ZeroZeroPoint()
    assert_scripted(block)
    out = block(torch.randn(3), SCALE, BIT_WIDTH)
    assert torch.equal(out, torch.tensor(0.0)) and not out.requires_grad
    assert (
        ZeroZeroPoint(dtype=torch.float64)(torch.randn(3), SCALE, BIT_WIDTH).dtype == torch.float64
    )
    assert block.state_dict() == {}
    assert block.load_state_dict({}, strict=True).missing_keys == []


@QUANTIZE
@SIGNED
def test_scale_shift_zero_point(quantize, signed):
    block = _ScaleShiftZeroPoint(RefIntQuant(signed), quantize)
    assert_scripted(block)
    z = torch.tensor([0.0, 0.123, 0.4, 2.0], requires_grad=True)
    scale = torch.tensor([0.05, 0.05, 0.02, 0.01], requires_grad=True)
    out = block(z, scale, BIT_WIDTH)
    zr = z.detach().clone().requires_grad_()
    sr = scale.detach().clone().requires_grad_()
    expected = ref_scale_shift(zr, sr, BIT_WIDTH, signed, quantize)
    assert torch.equal(out, expected)
    if quantize:
        # Rounded and clamped into the integer range.
        assert torch.equal(out, torch.round(out)) and bool(
            (out <= ref_max_int(signed, BIT_WIDTH)).all()
        )
    g = torch.randn(4)
    out.backward(g)
    expected.backward(g)
    assert_grad_close(z.grad, zr.grad)
    assert_grad_close(scale.grad, sr.grad)


class HalfStepQuant(jit.ScriptModule):
    """A zero-point quantizer stand-in: rounds to multiples of 0.5, returns Brevitas's tuple."""

    @jit.script_method
    def forward(self, x: Tensor):
        return torch.round(x * 2.0) / 2.0, torch.tensor(0.5), torch.tensor(0.0), torch.tensor(4.0)


@pytest.mark.parametrize("dequantized_shape", [None, (2, 2)])
def test_scale_shift_quant_zero_point(dequantized_shape):
    """Brevitas's private quantized zero point: zp_int_quant's value, viewed back to the
    dequantized shape, then value / scale + min_int."""
    block = _ScaleShiftQuantZeroPoint(HalfStepQuant(), RefIntQuant(True), (4,), dequantized_shape)
    assert_scripted(block)
    z = torch.tensor([0.2, 0.9, -1.3, 2.6])
    scale = torch.tensor(0.25)
    expected = torch.tensor([0.0, 1.0, -1.5, 2.5]) / scale - 8.0
    out = block(z, scale, BIT_WIDTH)
    assert torch.equal(out, expected if dequantized_shape is None else expected.view(2, 2))


def test_scale_shift_zero_point_bad_arguments():
    with pytest.raises(
        TypeError,
        match=r"_ScaleShiftZeroPoint: int_quant must be an integer "
        r"quantizer \(a module with min_int\(\) and to_int\(\)",
    ):
        _ScaleShiftZeroPoint(torch.nn.Identity(), False)
    with pytest.raises(
        TypeError, match="_ScaleShiftZeroPoint: quantize_zero_point must be a bool, got 'no'"
    ):
        _ScaleShiftZeroPoint(RefIntQuant(False), "no")


@QUANTIZE
def test_runtime_dynamic_group_zero_point(quantize):
    """Brevitas's public (not in __all__) block: per group of 4 along the last dim, minus the
    group's NegativeMinOrZero, into the integer domain of that group's scale."""
    block = RuntimeDynamicGroupZeroPoint(
        DynamicOverSubChannelBlockView(group_size=4, group_dim=-1),
        NegativeMinOrZero(stats_reduce_dim=-1, keepdim=True),
        RefIntQuant(signed=False),
        quantize,
    )
    assert_scripted(block)
    x = torch.tensor([[-0.3, 0.2, 0.1, -0.05, 0.4, 0.5, 0.6, 0.7], [0.0, -1.0, 2.0, 3.0] * 2])
    scale = torch.tensor([[0.01, 0.02], [0.05, 0.03]]).unsqueeze(-1)
    out = block(x, scale, BIT_WIDTH)
    groups = x.view(2, 2, 4)
    z = -torch.clamp(groups.min(dim=-1, keepdim=True).values, max=0.0)
    assert torch.equal(out, ref_scale_shift(z, scale, BIT_WIDTH, False, quantize))
    # 1.0 / 0.05 = 20 lies above the 4-bit range: clamped to 15 when quantized.
    assert out.shape == (2, 2, 1) and (not quantize or out.max().item() == 15.0)


# ---- StatsFromParameterZeroPoint ------------------------------------------------------------------


@QUANTIZE
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("affine", [(None, None), (1.5, 0.02)], ids=["no_affine", "affine"])
def test_stats_from_parameter_zero_point(quantize, per_channel, affine):
    rescale, shift = affine
    wp = torch.nn.Parameter(weight())
    shape = (4, 1, 1) if per_channel else ()
    block = StatsFromParameterZeroPoint(
        RefIntQuant(False),
        quantize,
        OverOutputChannelView() if per_channel else OverTensorView(),
        0,
        NegativeMinOverDim1() if per_channel else NegativeMinOverTensor(),
        shape,
        [wp],
        zero_point_affine_rescaling_init=rescale,
        zero_point_affine_shifting_init=shift,
    )
    assert_scripted(block)
    scale = PER_CHANNEL_SCALE if per_channel else SCALE
    out = block(wp, scale, BIT_WIDTH)
    wr = wp.detach().clone().requires_grad_()
    stats = ref_negative_min(wr, per_channel)
    params = []
    if rescale is not None:
        aw = torch.full(shape, rescale, requires_grad=True)
        ab = torch.full(shape, shift, requires_grad=True)
        params = [aw, ab]
        stats = stats * aw + ab
    expected = ref_scale_shift(-stats, scale, BIT_WIDTH, False, quantize)
    assert torch.equal(out, expected) and out.shape == expected.shape
    backward_same(out, expected)
    assert_grad_close(wp.grad, wr.grad)
    if rescale is not None:
        affine_block = block.affine_rescaling
        assert_grad_close(affine_block.affine_weight.grad, params[0].grad)
        assert_grad_close(affine_block.affine_bias.value.grad, params[1].grad)
        assert sorted(block.state_dict()) == [
            "affine_rescaling.affine_bias.value",
            "affine_rescaling.affine_weight",
        ]
    else:
        assert block.state_dict() == {}


def test_stats_from_parameter_zero_point_custom_scale_shift_and_errors():
    wp = torch.nn.Parameter(weight())
    custom = _ScaleShiftZeroPoint(RefIntQuant(True), True)
    block = StatsFromParameterZeroPoint(
        None,
        None,
        OverTensorView(),
        0,
        NegativeMinOverTensor(),
        (),
        [wp],
        scale_shift_zero_point_impl=custom,
    )
    assert block.scale_shift_zero_point is custom
    expected = ref_scale_shift(-ref_negative_min(wp.detach(), False), SCALE, BIT_WIDTH, True, True)
    assert torch.equal(block(wp, SCALE, BIT_WIDTH), expected)
    with pytest.raises(
        RuntimeError,
        match=r"StatsFromParameterZeroPoint: enabling shifting of the "
        r"zero point \(zero_point_affine_shifting_init=0.1\)",
    ):
        StatsFromParameterZeroPoint(
            RefIntQuant(False),
            False,
            OverTensorView(),
            0,
            NegativeMinOverTensor(),
            (),
            [wp],
            zero_point_affine_shifting_init=0.1,
        )


# ---- ParameterZeroPoint ---------------------------------------------------------------------------


@QUANTIZE
@pytest.mark.parametrize("shape", [None, (4, 1, 1)], ids=["per_tensor", "per_channel"])
def test_parameter_zero_point(quantize, shape):
    block = ParameterZeroPoint(-0.13, RefIntQuant(False), quantize, shape)
    assert_scripted(block)
    init = torch.tensor(-0.13) if shape is None else torch.full(shape, -0.13)
    assert torch.equal(block.value.detach(), init)
    scale = SCALE if shape is None else PER_CHANNEL_SCALE
    out = block(torch.randn(4, 3, 2), scale, BIT_WIDTH)
    leaf = init.clone().requires_grad_()
    expected = ref_scale_shift(abs_sign_grad(leaf), scale, BIT_WIDTH, False, quantize)
    assert torch.equal(out, expected)
    backward_same(out, expected)
    assert_grad_close(block.value.grad, leaf.grad)

    saved = block.state_dict()
    assert list(saved) == ["value"]
    fresh = ParameterZeroPoint(0.0, RefIntQuant(False), quantize, shape)
    fresh.load_state_dict(saved)
    assert torch.equal(fresh(torch.randn(2), scale, BIT_WIDTH), out.detach())


def test_parameter_zero_point_gradcheck_float64():
    block = ParameterZeroPoint(
        torch.tensor([0.3, -0.7]), RefIntQuant(True), False, (2,), dtype=torch.float64
    )
    scale = torch.tensor([0.5, 0.25], dtype=torch.float64)
    bw = torch.tensor(8.0, dtype=torch.float64)
    g = torch.tensor([1.0, -2.0], dtype=torch.float64)
    block(torch.empty(1), scale, bw).mul(g).sum().backward()
    # d(|z| / s + min_int)/dz = sign(z) / s, by central differences.
    eps = 1e-6
    numeric = []
    for i in range(2):
        with torch.no_grad():
            orig = block.value[i].item()
            block.value[i] = orig + eps
            plus = (block(torch.empty(1), scale, bw) * g).sum().item()
            block.value[i] = orig - eps
            minus = (block(torch.empty(1), scale, bw) * g).sum().item()
            block.value[i] = orig
        numeric.append((plus - minus) / (2 * eps))
    torch.testing.assert_close(
        block.value.grad, torch.tensor(numeric, dtype=torch.float64), rtol=1e-6, atol=1e-9
    )


def test_parameter_zero_point_init_checks_and_missing_keys(monkeypatch):
    name = "ParameterZeroPoint"
    with pytest.raises(
        RuntimeError,
        match=rf"{name}: zero_point_init has shape \(3,\), which is "
        rf"neither a scalar \(\) nor zero_point_shape \(4, 1\)",
    ):
        ParameterZeroPoint(torch.zeros(3), RefIntQuant(False), False, (4, 1))
    with pytest.raises(ValueError, match=f"{name}: zero_point_init must be finite, got inf"):
        ParameterZeroPoint(float("inf"), RefIntQuant(False), False)
    init = torch.tensor([0.1, 0.2])
    block = ParameterZeroPoint(init, RefIntQuant(False), False, (2,))
    with torch.no_grad():
        block.value.add_(1.0)
    assert torch.equal(init, torch.tensor([0.1, 0.2]))  # the caller's tensor is not aliased
    with pytest.raises(RuntimeError, match="Missing key"):
        block.load_state_dict({})
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert block.load_state_dict({}).missing_keys == []


# ---- ParameterFromStatsFromParameterZeroPoint ------------------------------------------------------


def stats_zero_point(
    wp: Tensor,
    per_channel: bool,
    quantize: bool = False,
    rescale: Optional[float] = None,
    shift: Optional[float] = None,
):
    return ParameterFromStatsFromParameterZeroPoint(
        RefIntQuant(False),
        quantize,
        OverOutputChannelView() if per_channel else OverTensorView(),
        0,
        NegativeMinOverDim1() if per_channel else NegativeMinOverTensor(),
        (4, 1, 1) if per_channel else (),
        [wp],
        zero_point_affine_rescaling_init=rescale,
        zero_point_affine_shifting_init=shift,
    )


@QUANTIZE
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("affine", [(None, None), (2.0, -0.01)], ids=["no_affine", "affine"])
def test_parameter_from_stats_zero_point(quantize, per_channel, affine):
    rescale, shift = affine
    wp = torch.nn.Parameter(weight())
    block = stats_zero_point(wp, per_channel, quantize, rescale, shift)
    assert_scripted(block)
    assert "value" not in block.state_dict()
    scale = PER_CHANNEL_SCALE if per_channel else SCALE
    out = block(wp, scale, BIT_WIDTH)

    init = ref_negative_min(wp.detach(), per_channel)
    if rescale is not None:
        init = init * rescale + shift
    init = 0.0 + init
    assert torch.equal(block.value.detach(), init) and block.init_done
    leaf = init.clone().requires_grad_()
    expected = ref_scale_shift(abs_sign_grad(leaf), scale, BIT_WIDTH, False, quantize)
    assert torch.equal(out, expected)
    backward_same(out, expected)
    assert_grad_close(block.value.grad, leaf.grad)
    assert wp.grad is None or torch.count_nonzero(wp.grad) == 0

    # Later calls use the learned value.
    with torch.no_grad():
        wp.mul_(5.0)
        block.value.sub_(0.01)
    expected2 = ref_scale_shift(torch.abs(init - 0.01), scale, BIT_WIDTH, False, quantize)
    assert torch.equal(block(wp, scale, BIT_WIDTH), expected2)


def test_parameter_from_stats_zero_point_state_dict():
    wp = torch.nn.Parameter(weight())
    block = stats_zero_point(wp, True)
    assert block.state_dict() == {}
    block(wp, PER_CHANNEL_SCALE, BIT_WIDTH)
    saved = block.state_dict()
    assert list(saved) == ["value"]

    # Loading marks the block initialised: the loaded value is used, no statistics are taken.
    other = torch.nn.Parameter(weight() * 7.0)
    fresh = stats_zero_point(other, True)
    result = fresh.load_state_dict(saved, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == [] and fresh.init_done
    out = fresh(other, PER_CHANNEL_SCALE, BIT_WIDTH)
    assert torch.equal(
        out, ref_scale_shift(torch.abs(saved["value"]), PER_CHANNEL_SCALE, BIT_WIDTH, False, False)
    )
    assert torch.equal(fresh.value.detach(), saved["value"])

    lazy = stats_zero_point(wp, True)
    assert lazy.load_state_dict({}, strict=True).missing_keys == []  # a float checkpoint
    assert lazy.load_state_dict(brevitas_format({}), strict=False).missing_keys == ["value"]
    assert not lazy.init_done


def test_parameter_from_stats_zero_point_local_loss_mode_and_full_state_dict(monkeypatch):
    wp = torch.nn.Parameter(weight())
    block = stats_zero_point(wp, False)
    block.local_loss_mode = True
    out = block(wp, SCALE, BIT_WIDTH)
    assert torch.equal(
        out, ref_scale_shift(-ref_negative_min(wp.detach(), False), SCALE, BIT_WIDTH, False, False)
    )
    assert not block.init_done
    out.sum().backward()
    assert torch.equal(block.value.grad, torch.zeros(()))  # linked with a zero gradient (DDP)
    monkeypatch.setattr(config, "_FULL_STATE_DICT", True, raising=False)
    assert list(block.state_dict()) == ["value"]


# ---- ParameterFromRuntimeZeroPoint ----------------------------------------------------------------


def runtime_zero_point(
    per_channel: bool,
    steps: int = 3,
    quantize: bool = False,
    momentum: Optional[float] = 0.1,
    **kwargs,
):
    if per_channel:
        return ParameterFromRuntimeZeroPoint(
            steps,
            RefIntQuant(False),
            quantize,
            NegativeMinOverDim1(),
            (1, 4, 1),
            OverOutputChannelView(permute_dims=(1, 0, 2)),
            zero_point_stats_momentum=momentum,
            **kwargs,
        )
    return ParameterFromRuntimeZeroPoint(
        steps,
        RefIntQuant(False),
        quantize,
        NegativeMinOverTensor(),
        (),
        OverTensorView(),
        zero_point_stats_momentum=momentum,
        **kwargs,
    )


def batches(n: int) -> List[Tensor]:
    g = torch.Generator().manual_seed(23)
    return [torch.randn(5, 4, 3, generator=g) * (0.5 + i) for i in range(n)]


@QUANTIZE
@pytest.mark.parametrize("momentum", [0.1, None], ids=["ema", "cumulative"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_parameter_from_runtime_zero_point(quantize, momentum, per_channel):
    steps = 3
    block = runtime_zero_point(per_channel, steps, quantize, momentum)
    assert_scripted(block)
    scale = torch.tensor(0.02)
    data = batches(steps + 2)
    running = None
    for step in range(steps):
        x = data[step].clone().requires_grad_()
        out = block(x, scale, BIT_WIDTH)
        xr = data[step].clone().requires_grad_()
        stats = ref_negative_min(xr, per_channel, channel_dim=1)
        # During the warm-up the zero point is the batch statistic.
        expected = ref_scale_shift(abs_sign_grad(stats), scale, BIT_WIDTH, False, quantize)
        assert torch.equal(out, expected), step
        backward_same(out, expected)
        assert_grad_close(x.grad, xr.grad)
        assert torch.equal(block.value.grad, torch.zeros_like(block.value))  # linked (DDP)
        block.value.grad = None
        s = stats.detach()
        # The first batch is added to a buffer of zeros (so -0.0 becomes +0.0).
        running = 0.0 + s if running is None else ref_momentum_update(running, s, step, momentum)

    block.eval()
    assert torch.equal(
        block(data[0], scale, BIT_WIDTH),
        ref_scale_shift(torch.abs(running), scale, BIT_WIDTH, False, quantize),
    )
    block.train()

    out = block(data[steps], scale, BIT_WIDTH)
    init = 0.0 + running
    assert block.counter == steps + 1 and torch.equal(block.value.detach(), init)
    leaf = init.clone().requires_grad_()
    expected = ref_scale_shift(abs_sign_grad(leaf), scale, BIT_WIDTH, False, quantize)
    assert torch.equal(out, expected)
    backward_same(out, expected)
    assert_grad_close(block.value.grad, leaf.grad)
    block.eval()
    assert torch.equal(block(data[0], scale, BIT_WIDTH), out.detach())


def test_parameter_from_runtime_zero_point_eval_before_training():
    block = runtime_zero_point(False)
    block.eval()
    # The running statistic starts at 0: z = 0 / scale + min_int.
    assert torch.equal(block(batches(1)[0], SCALE, BIT_WIDTH), torch.tensor(0.0))
    assert block.counter == 0


def test_parameter_from_runtime_zero_point_local_loss_mode():
    block = runtime_zero_point(False)
    block.local_loss_mode = True
    x = batches(1)[0]
    out = block(x, SCALE, BIT_WIDTH)
    assert torch.equal(
        out, ref_scale_shift(torch.abs(ref_negative_min(x, False)), SCALE, BIT_WIDTH, False, False)
    )
    assert block.counter == 0 and torch.equal(block.buffer, torch.zeros(()))


def test_parameter_from_runtime_zero_point_state_dict():
    steps = 2
    block = runtime_zero_point(True, steps)
    data = batches(4)
    assert block.state_dict() == {}
    block(data[0], SCALE, BIT_WIDTH)
    saved = block.state_dict()
    # Mid warm-up the running statistic is saved as the value; the buffer never is.
    assert list(saved) == ["value"]
    assert torch.equal(saved["value"], ref_negative_min(data[0], True, channel_dim=1))

    # Our checkpoint goes on with the warm-up where it stopped.
    resumed = runtime_zero_point(True, steps)
    resumed.load_state_dict(saved, strict=True)
    assert resumed.counter == block.counter == 1
    for x in data[1:]:
        assert torch.equal(resumed(x, SCALE, BIT_WIDTH), block(x, SCALE, BIT_WIDTH))

    # A checkpoint without that record (Brevitas's) ends the warm-up, as in Brevitas.
    fresh = runtime_zero_point(True, steps)
    result = fresh.load_state_dict(brevitas_format(saved), strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert fresh.counter == steps + 1
    out = fresh(data[3] * 10.0, SCALE, BIT_WIDTH)
    assert torch.equal(
        out, ref_scale_shift(torch.abs(saved["value"]), SCALE, BIT_WIDTH, False, False)
    )
    assert torch.equal(fresh.value.detach(), saved["value"])

    lazy = runtime_zero_point(True, steps)
    assert lazy.load_state_dict({}, strict=True).missing_keys == []  # a float checkpoint
    result = lazy.load_state_dict(brevitas_format({}), strict=False)
    assert result.missing_keys == ["value"] and lazy.counter == 0


def test_parameter_from_runtime_zero_point_bad_arguments():
    name = "ParameterFromRuntimeZeroPoint"
    with pytest.raises(ValueError, match=f"{name}: collect_stats_steps must be a positive int"):
        runtime_zero_point(False, steps=0)
    with pytest.raises(
        ValueError,
        match=rf"{name}: zero_point_stats_momentum must be None "
        rf"\(cumulative average\) or a float in \[0, 1\], got 2",
    ):
        runtime_zero_point(False, momentum=2)
    with pytest.raises(
        ValueError,
        match=rf"{name}: zero_point_shape must be a tuple of positive "
        rf"ints \(\(\) for a scalar\), got None",
    ):
        ParameterFromRuntimeZeroPoint(
            1, RefIntQuant(False), False, NegativeMinOverTensor(), None, OverTensorView()
        )
    with pytest.raises(TypeError, match=f"{name}: int_quant must be an integer quantizer"):
        ParameterFromRuntimeZeroPoint(1, None, False, NegativeMinOverTensor(), (), OverTensorView())
