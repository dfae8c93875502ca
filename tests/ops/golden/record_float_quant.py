"""Records Brevitas 0.12.1's FloatQuant (with its FloatClamp and TensorClamp) outputs and
gradients for tests/ops/test_float_quant.py. Runs in the Brevitas environment only:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python tests/ops/golden/record_float_quant.py

Writes tests/ops/golden/float_quant.pt: per case, the format, max_value (Brevitas's
min(max_float, max_available_float)), x, scale, the upstream gradient, y and the gradients of x and
scale; and the forward of special values."""

from pathlib import Path

import torch
from brevitas.core.function_wrapper import FloatClamp, RoundSte, TensorClamp
from brevitas.core.quant.float import FloatQuant
from brevitas.function.ops import compute_max_mantissa, max_float
from brevitas.utils.float_quant_utils import get_max_available_float

HERE = Path(__file__).resolve().parent

# name: (exponent bits, mantissa bits, bias, signed, saturating, inf_values, nan_values)
FORMATS = {
    "ocp_e4m3": (4, 3, 7, True, True, None, ("111",)),
    "ocp_e4m3_nonsat": (4, 3, 7, True, False, None, ("111",)),
    "ocp_e5m2": (5, 2, 15, True, True, ("00",), ("01", "11", "10")),
    "ocp_e5m2_nonsat": (5, 2, 15, True, False, ("00",), ("01", "11", "10")),
    "fnuz_e4m3": (4, 3, 8, True, True, None, None),
    "fnuz_e5m2": (5, 2, 16, True, True, None, None),
    "e3m2": (3, 2, 3, True, True, None, None),
    "e2m1": (2, 1, 1, True, True, None, None),
    "e4m3_unsigned": (4, 3, 7, False, True, None, None),
}


class GivenScale(torch.nn.Module):
    def __init__(self, scale: torch.Tensor) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(scale.clone())

    def forward(self, x, float_scaling_impl_value=None):
        return self.scale


def max_value_of(e, m, bias, inf_values, nan_values, saturating):
    fmt_max = max_float(
        torch.tensor(float(e)),
        compute_max_mantissa(torch.tensor(float(m))),
        torch.tensor(float(bias)),
    )
    available = get_max_available_float(e, m, bias, nan_values, inf_values, saturating)
    return float(torch.min(fmt_max, torch.tensor(available)))


def block(fmt, scale):
    e, m, bias, signed, saturating, inf_values, nan_values = fmt
    available = get_max_available_float(e, m, bias, nan_values, inf_values, saturating)
    clamp = FloatClamp(
        TensorClamp(),
        signed,
        inf_values=inf_values,
        nan_values=nan_values,
        max_available_float=available,
        saturating=saturating,
    )
    return FloatQuant(
        bit_width=e + m + int(signed),
        signed=signed,
        exponent_bit_width=e,
        mantissa_bit_width=m,
        exponent_bias=bias,
        float_clamp_impl=clamp,
        input_view_impl=torch.nn.Identity(),
        scaling_impl=GivenScale(scale),
        float_to_int_impl=RoundSte(),
    )


def main() -> None:
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(4, 6, 5, generator=g) * 4
    x0[0, 0, :] = torch.tensor([0.0, -0.0, 1e-30, 1000.0, -1000.0])
    # Just below and at powers of two, and on ties of the 3-bit grid.
    x0[1, 0, :] = torch.tensor([1.0, 2.0 * (1 - 2**-24), 4.0, 1.0625, 1.1875])
    upstream = torch.randn(4, 6, 5, generator=g)
    specials = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, 1e38])
    cases = {}
    for name, fmt in FORMATS.items():
        scales = (
            ("tensor", torch.tensor(0.37)),
            ("channel", torch.tensor([0.5, 0.01, 2.0, 0.125]).view(4, 1, 1)),
        )
        # float64 too: the scale's gradient is a sum of terms that cancel, which float32 loses.
        for (scale_name, scale), dtype in [
            (sc, dt) for sc in scales for dt in (torch.float32, torch.float64)
        ]:
            quant = block(fmt, scale.to(dtype))
            x = x0.to(dtype).clone().requires_grad_()
            y = quant(x)[0]
            y.backward(upstream.to(dtype))
            with torch.no_grad():
                special_y = block(fmt, torch.tensor(1.0))(specials)[0]
            cases[f"{name}/{scale_name}/{str(dtype)[6:]}"] = {
                "format": fmt[:5] + (fmt[5] is not None, fmt[6] is not None),
                "max_value": max_value_of(fmt[0], fmt[1], fmt[2], fmt[5], fmt[6], fmt[4]),
                "x": x0.to(dtype).clone(),
                "scale": scale.to(dtype).clone(),
                "upstream": upstream.to(dtype).clone(),
                "y": y.detach(),
                "grad_x": x.grad,
                "grad_scale": quant.scaling_impl.scale.grad,
                "specials": specials,
                "special_y": special_y,
            }
    torch.save(cases, HERE / "float_quant.pt")
    print(f"wrote {len(cases)} cases to {HERE / 'float_quant.pt'}")


if __name__ == "__main__":
    main()
