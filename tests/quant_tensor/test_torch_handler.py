"""torch functions on IntQuantTensors: the metadata-keeping handlers, torch.cat, and the plain
tensor fallback for every other function."""

import pytest
import torch
import torch.nn.functional as F

from brevitas_cpp.quant_tensor import IntQuantTensor


def make(ints, scale=0.25, zero_point=0.0, bit_width=8.0, signed=True, training=False):
    ints = torch.as_tensor(ints, dtype=torch.float32)
    scale = torch.as_tensor(scale, dtype=torch.float32)
    zero_point = torch.as_tensor(zero_point, dtype=torch.float32)
    return IntQuantTensor(
        (ints - zero_point) * scale, scale, zero_point, torch.tensor(bit_width), signed, training
    )


def grid(*shape, seed=0):
    """Seeded signed 8-bit integers as floats."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-128, 128, shape, generator=g).float()


def assert_metadata_kept(out, qt):
    assert isinstance(out, IntQuantTensor)
    for name in ("scale", "zero_point", "bit_width", "signed_t", "training_t"):
        assert getattr(out, name) is getattr(qt, name), name


# ---- handlers that keep the metadata -------------------------------------------------------------

INVARIANT = {
    "pad": (F.pad, ([1, 2, 0, 1],), {}),
    "pad_value": (F.pad, ([1, 1],), {"mode": "constant", "value": 0.0}),
    "relu": (F.relu, (), {}),
    "relu_inplace_kw": (F.relu, (), {"inplace": False}),
    "relu6": (F.relu6, (), {}),
    "hardtanh": (F.hardtanh, (-2.0, 3.0), {}),
    "dropout_eval": (F.dropout, (), {"p": 0.5, "training": False}),
    "dropout2d_eval": (F.dropout2d, (), {"training": False}),
    "dropout3d_eval": (F.dropout3d, (), {"training": False}),
    "alpha_dropout_eval": (F.alpha_dropout, (), {"training": False}),
    "max_pool1d": (F.max_pool1d, (2,), {}),
    "max_pool2d": (F.max_pool2d, (2,), {"stride": 1}),
    "max_pool3d": (F.max_pool3d, (2,), {}),
    "adaptive_max_pool1d": (F.adaptive_max_pool1d, (3,), {}),
    "adaptive_max_pool2d": (F.adaptive_max_pool2d, ((2, 3),), {}),
    "adaptive_max_pool3d": (F.adaptive_max_pool3d, (2,), {}),
    "pixel_shuffle": (F.pixel_shuffle, (2,), {}),
    "pixel_unshuffle": (F.pixel_unshuffle, (2,), {}),
    "interpolate_nearest": (F.interpolate, (), {"scale_factor": 2}),
    "interpolate_nearest_size": (F.interpolate, (), {"size": (6, 10), "mode": "nearest"}),
    "interpolate_nearest_exact": (
        F.interpolate,
        (),
        {"scale_factor": 1.5, "mode": "nearest-exact"},
    ),
}
# input shapes the functions accept
SHAPES = {
    "max_pool1d": (2, 4, 6),
    "adaptive_max_pool1d": (2, 4, 6),
    "max_pool3d": (1, 4, 4, 4, 4),
    "adaptive_max_pool3d": (1, 4, 4, 4, 4),
}


@pytest.mark.parametrize("name", list(INVARIANT))
def test_invariant_functions_keep_metadata(name):
    fn, args, kwargs = INVARIANT[name]
    qt = make(grid(*SHAPES.get(name, (2, 4, 4, 6))), scale=0.125)
    out = fn(qt, *args, **kwargs)
    assert_metadata_kept(out, qt)
    assert torch.equal(out.value, fn(qt.value, *args, **kwargs))
    assert out.is_valid


def test_dropout_in_training_keeps_metadata():
    qt = make(grid(4, 8), scale=0.5)
    torch.manual_seed(3)
    out = F.dropout(qt, p=0.5, training=True)
    torch.manual_seed(3)
    ref = F.dropout(qt.value, p=0.5, training=True)
    assert_metadata_kept(out, qt)
    assert torch.equal(out.value, ref)


def test_max_pool_with_indices_is_plain():
    # return_indices=True dispatches to max_pool2d_with_indices, not registered (as Brevitas)
    qt = make(grid(1, 2, 4, 4), scale=0.5)
    out, idx = F.max_pool2d(qt, 2, return_indices=True)
    ref, ref_idx = F.max_pool2d(qt.value, 2, return_indices=True)
    assert type(out) is torch.Tensor
    assert torch.equal(out, ref) and torch.equal(idx, ref_idx)


def test_interpolate_other_modes_return_plain_tensors():
    qt = make(grid(1, 2, 4, 4), scale=0.5)
    for mode in ("bilinear", "bicubic", "area"):
        out = F.interpolate(qt, scale_factor=2, mode=mode)
        assert type(out) is torch.Tensor
        assert torch.equal(out, F.interpolate(qt.value, scale_factor=2, mode=mode))


def test_torch_flatten_reshape_transpose():
    scale = torch.tensor([0.5, 0.25]).view(1, 2, 1)
    qt = make(grid(3, 2, 4), scale=scale)
    out = torch.flatten(qt, 1)
    assert_metadata_kept(out, qt) and torch.equal(out.value, qt.value.flatten(1))
    out = torch.reshape(qt, (6, 4))
    assert_metadata_kept(out, qt) and torch.equal(out.value, qt.value.reshape(6, 4))
    out = torch.transpose(qt, 1, 2)
    assert torch.equal(out.value, qt.value.transpose(1, 2))
    assert torch.equal(out.scale, scale.transpose(1, 2))  # the per-channel scale follows its dim


# ---- every other torch function: computed on the value, plain tensor out --------------------------

PLAIN = {
    "exp": lambda x: torch.exp(x),
    "torch.relu": lambda x: torch.relu(x),  # only F.relu is registered (as Brevitas)
    "sigmoid": lambda x: torch.sigmoid(x),
    "gelu": lambda x: F.gelu(x),
    "sum": lambda x: torch.sum(x, dim=1),
    "stack": lambda x: torch.stack([x, x]),
    "matmul": lambda x: torch.matmul(x, torch.ones(6, 2)),
    "clamp": lambda x: torch.clamp(x, min=-1.0),
    "avg_pool1d": lambda x: F.avg_pool1d(x, 2),
    "where_kwargs": lambda x: torch.where(torch.ones(4, 6, dtype=torch.bool), input=x, other=x),
}


@pytest.mark.parametrize("name", list(PLAIN))
def test_unknown_functions_return_plain_tensors(name):
    fn = PLAIN[name]
    qt = make(grid(4, 6), scale=0.125)
    out = fn(qt)
    assert type(out) is torch.Tensor
    assert torch.equal(out, fn(qt.value))


def test_plain_fallback_keeps_gradients():
    v = (grid(3, 4) * 0.125).requires_grad_()
    qt = IntQuantTensor(v, 0.125, 0.0, 8.0, True, True)
    torch.sin(qt).sum().backward()
    assert torch.equal(v.grad, torch.cos(v.detach()))


# ---- torch.cat ---------------------------------------------------------------------------------------


def test_cat_eval_same_grid():
    a, b = make(grid(2, 3), scale=0.5), make(grid(1, 3, seed=1), scale=0.5)
    for out in (
        torch.cat([a, b]),
        torch.cat([a, b], 0),
        torch.cat((a, b), dim=0),
        torch.cat(tensors=[a, b], dim=0),
        IntQuantTensor.cat([a, b], 0),
    ):
        assert isinstance(out, IntQuantTensor)
        assert torch.equal(out.value, torch.cat([a.value, b.value]))
        assert (
            out.scale is a.scale and out.zero_point is a.zero_point and out.bit_width is a.bit_width
        )
        assert out.signed is True and out.training is False
    out = torch.cat([a, b.transpose(0, 1).transpose(0, 1), a], dim=0)
    assert out.shape == (5, 3)


def test_cat_training_averages_the_metadata():
    a = make(grid(2, 3), scale=0.5, training=True)
    b = make(grid(2, 1), scale=0.25, zero_point=0.0)
    c = make(grid(2, 2), scale=0.125)
    out = torch.cat([a, b, c], dim=1)
    assert out.training is True
    # ((0 + 0.5) + 0.25) + 0.125) / 3, left to right
    assert torch.equal(out.scale, torch.tensor(((0.5 + 0.25) + 0.125) / 3, dtype=torch.float32))
    assert torch.equal(out.bit_width, torch.tensor(8.0))
    assert torch.equal(out.value, torch.cat([a.value, b.value, c.value], dim=1))


@pytest.mark.parametrize(
    "other, match",
    [
        (dict(scale=0.25), r"scaling factors are different in eval mode: 0.5 vs 0.25"),
        (dict(zero_point=1.0), r"zero points are different in eval mode: 0.0 vs 1.0"),
        (dict(bit_width=4.0), r"bit widths are different: 8.0 vs 4.0"),
        (dict(signed=False), r"signs are different: signed=True vs signed=False"),
    ],
)
def test_cat_mismatches(other, match):
    a = make([[1.0, 2.0]], scale=0.5)
    kwargs = dict(scale=0.5)
    kwargs.update(other)
    b = make([[1.0, 2.0]], **kwargs)
    with pytest.raises(RuntimeError, match=match):
        torch.cat([a, b])


def test_cat_training_still_needs_equal_bit_width_and_sign():
    a = make([[1.0]], training=True)
    with pytest.raises(RuntimeError, match=r"bit widths are different"):
        torch.cat([a, make([[1.0]], bit_width=4.0, training=True)])
    with pytest.raises(RuntimeError, match=r"signs are different"):
        torch.cat([a, make([[1.0]], signed=False, training=True)])


def test_cat_with_plain_tensors_is_plain():
    a = make(grid(2, 3), scale=0.5)
    t = torch.ones(1, 3)
    for out in (torch.cat([a, t]), torch.cat([t, a])):
        assert type(out) is torch.Tensor
    assert torch.equal(torch.cat([a, t]), torch.cat([a.value, t]))


def test_cat_single_and_out():
    a = make(grid(2, 3), scale=0.5)
    assert torch.cat([a]) is a
    with pytest.raises(RuntimeError, match=r"IntQuantTensor.cat: out= is not supported"):
        torch.cat([a, a], 0, out=torch.empty(4, 3))


def test_cat_device_mismatch():
    a = make(grid(2, 3), scale=0.5)
    with pytest.raises(
        RuntimeError,
        match=r"IntQuantTensor.cat: tensors\[0\] is on cpu but tensors\[1\] is on meta",
    ):
        torch.cat([a, a.to("meta")])
