"""brevitas_cpp.utils.torch_utils against Brevitas 0.12's brevitas.utils.torch_utils: numbers
recorded in tests/golden/brevitas_0_12_modules.pt (float_internal_scale and its gradient, the
padding helpers, kthvalue in float16, is_broadcastable, channel view shapes) and the containers'
behaviour written out."""

import copy
import os

import pytest
import torch
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.utils import torch_utils as tu

GOLDEN_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "golden",
    "brevitas_0_12_modules.pt",
)
GOLDEN = torch.load(GOLDEN_FILE)["torch_utils"]


def test_float_internal_scale_matches_brevitas():
    rec = GOLDEN["float_internal_scale"]
    x = rec["x"].clone().requires_grad_(True)
    out = tu.float_internal_scale(
        x, rec["mantissa_bit_width"], rec["fp_internal_scale_min"], rec["eps"]
    )
    assert torch.equal(out.detach(), rec["out"])
    (out * rec["g"]).sum().backward()
    assert torch.equal(x.grad, rec["x_grad"])
    # The formula: 2 ** max(floor(log2(|x| + eps)) - mantissa, min), e.g. 0.5 -> 2**-4 with 3
    # mantissa bits; zero -> the minimum 2**-6.
    assert rec["x"][0, 2].item() == 0.5 and out[0, 2].item() == 2.0**-4
    assert rec["x"][0, 0].item() == 0.0 and out[0, 0].item() == 2.0**-6


def test_float_internal_scale_is_scripted_with_jit():
    assert isinstance(tu.float_internal_scale, torch.jit.ScriptFunction) == config.JIT_ENABLED


def test_padding_matches_brevitas():
    y = GOLDEN["padding_input"]
    for (dim, multiple), expected in GOLDEN["padding_to_multiple"].items():
        assert torch.equal(tu.padding_to_multiple(y, dim, multiple), expected), (dim, multiple)
        assert expected.shape[dim] % multiple == 0
    for (dim, new), expected in GOLDEN["pad_to_dim"].items():
        assert torch.equal(tu.pad_to_dim(y, dim, new), expected), (dim, new)
        assert expected.shape[dim] == new


def test_kthvalue_matches_brevitas():
    x = GOLDEN["kthvalue_input"]
    assert x.dtype == torch.float16
    for (k, dim, keepdim), (values, indices) in GOLDEN["kthvalue"].items():
        got_values, got_indices = tu.kthvalue(x, k, dim=dim, keepdim=keepdim)
        assert got_values.dtype == torch.float16
        assert torch.equal(got_values, values) and torch.equal(got_indices, indices)
    with pytest.raises(RuntimeError, match="out argument"):
        tu.kthvalue(x, 1, out=(torch.empty(0), torch.empty(0, dtype=torch.long)))


def test_shapes_match_brevitas():
    for (a, b), expected in GOLDEN["is_broadcastable"].items():
        assert tu.is_broadcastable(a, b) is expected, (a, b)
    for (shape, dim), expected in GOLDEN["channel_view_shape"].items():
        assert tu.compute_channel_view_shape(torch.zeros(shape), dim) == expected


def test_tuple_sequential():
    class Split(nn.Module):
        def forward(self, x):
            return x, 2 * x

    class Add(nn.Module):
        def forward(self, a, b):
            return a + b

    seq = tu.TupleSequential(Add(), Split(), Add())
    a, b = torch.ones(2), torch.full((2,), 3.0)
    assert torch.equal(seq(a, b), 3 * (a + b))


def test_kwargs_forward_hook():
    seen = []

    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            return x * factor

    inner = Scale()
    hooked = tu.KwargsForwardHook(inner, lambda m, *args, **kw: seen.append((m, args, kw)))
    out = hooked(torch.ones(2), factor=3.0)
    assert torch.equal(out, torch.full((2,), 3.0))
    module, args, kwargs = seen[0]
    assert module is inner and kwargs == {"factor": 3.0}
    assert torch.equal(args[0], torch.ones(2)) and args[1] is out


def test_partial_deepcopy_shares_parameter_storage():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    copied = tu.torch_partial_deepcopy(model)
    assert copied[0].weight is not model[0].weight
    assert copied[0].weight.data_ptr() == model[0].weight.data_ptr()
    # Buffers are deep-copied.
    assert copied[1].running_mean.data_ptr() != model[1].running_mean.data_ptr()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert torch.equal(copied[0].weight, model[0].weight)
    assert copy.deepcopy(model)[0].weight.data_ptr() != model[0].weight.data_ptr()


def test_torch_dtype_decorator():
    before = torch.get_default_dtype()

    @tu.torch_dtype(torch.float64)
    def make():
        return torch.zeros(1).dtype

    assert make() == torch.float64
    assert torch.get_default_dtype() == before


def test_init_process_group_outside_torchrun_does_nothing(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    tu.init_process_group("gloo")
    assert not torch.distributed.is_initialized()


def test_stop_fwd_exception():
    assert issubclass(tu.StopFwdException, Exception)
