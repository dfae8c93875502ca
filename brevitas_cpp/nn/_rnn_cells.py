"""The time loops of QuantRNN and QuantLSTM: one module per layer and direction holding the
activation quantizers' fused modules (Brevitas's "fast cell"), scriptable so that with
``BREVITAS_JIT=1`` a layer runs its whole sequence compiled, and ``_CellProxies``, the
``layer.cell`` that keeps the proxies themselves under Brevitas's state_dict keys."""

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brevitas_cpp.core.bit_width import BitWidthConst
from brevitas_cpp.core.quant import RescalingIntQuant
from brevitas_cpp.core.scaling import ParameterFromRuntimeStatsScaling
from brevitas_cpp.core.zero_point import ZeroZeroPoint

# What a quantizer gives the time loop: the value and, when quantized, its metadata.
_OptTuple = Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]


class _NoQuantInner(nn.Module):
    def forward(self, x: Tensor) -> _OptTuple:
        return x, None, None, None


class _NoQuant(nn.Module):
    """Stands in for a quantizer that quantizes nothing (no fused module): the value, no
    metadata. Its ``tensor_quant`` does the same, so the CIFG path compiles as for a fused
    module."""

    def __init__(self) -> None:
        super().__init__()
        self.tensor_quant = _NoQuantInner()

    def forward(self, x: Tensor) -> _OptTuple:
        return x, None, None, None


# (scale, zero_point, bit_width) of a quantizer fixed for a whole sequence.
_Frozen = Optional[Tuple[Tensor, Tensor, Tensor]]


class _StepQuant(nn.Module):
    """A quantizer of the time loop that works everything out on every step (Brevitas's fast
    cell calls the same fused module)."""

    def __init__(self, fused: nn.Module) -> None:
        super().__init__()
        self.fused = fused

    def frozen(self) -> _Frozen:
        return None

    def forward(self, x: Tensor, frozen: _Frozen) -> _OptTuple:
        return self.fused(x)

    def tensor_quant_only(self, x: Tensor) -> _OptTuple:
        return self.fused.tensor_quant(x)


class _SequenceQuant(_StepQuant):
    """A quantizer whose scale, zero point and bit width do not depend on its input once its
    statistics are in (the stock activation quantizer: a learned scale initialised from runtime
    statistics, zero point 0): in the learned phase they are computed once per sequence
    (frozen()) instead of once per time step, with the same values. Only the gradient of the
    learned scale is summed over the steps before its division by the threshold rather than
    after, which moves it by rounding only. During the statistics phase frozen() is None and
    every step runs the whole quantizer, as Brevitas's loop does."""

    def frozen(self) -> _Frozen:
        tensor_quant = self.fused.tensor_quant
        scaling = tensor_quant.scaling_impl
        if (
            tensor_quant.observer_only
            or not scaling.training
            or scaling.counter <= scaling.collect_stats_steps
        ):
            return None
        bit_width = tensor_quant.msb_clamp_bit_width_impl()
        scale = scaling._learned_scale(tensor_quant.int_threshold(bit_width))
        return scale, tensor_quant.zero_point_impl.zero_point.value.detach(), bit_width

    def forward(self, x: Tensor, frozen: _Frozen) -> _OptTuple:
        if frozen is None:
            return self.fused(x)
        scale, zero_point, bit_width = frozen
        y = self.fused.activation_impl(x)
        y = self.fused.tensor_quant.int_quant(scale, zero_point, bit_width, y)
        return y, scale, zero_point, bit_width


def _fused(proxy: nn.Module) -> nn.Module:
    """What the time loop calls for an activation proxy: its activation fused with its quantizer
    (Brevitas's fast cell calls the same module), or _NoQuant when it has neither; wrapped in
    _SequenceQuant when its metadata can be computed once per sequence, else in _StepQuant."""
    fused = proxy.fused_activation_quant_proxy
    if fused is None:
        return _StepQuant(_NoQuant())
    return _SequenceQuant(fused) if _freezes_per_sequence(fused) else _StepQuant(fused)


def _fused_key(fused: Optional[nn.Module]) -> Tuple[int, ...]:
    """The identity of a fused module and of the blocks _fused decides on."""
    tensor_quant = getattr(fused, "tensor_quant", None)
    blocks = [fused, tensor_quant] + [
        getattr(tensor_quant, name, None)
        for name in ("scaling_impl", "zero_point_impl", "msb_clamp_bit_width_impl")
    ]
    return tuple(id(block) for block in blocks)


def _freezes_per_sequence(fused: nn.Module) -> bool:
    """The stock activation quantizer, by exact types (a subclass may compute otherwise)."""
    tensor_quant = fused.tensor_quant
    return (
        type(tensor_quant) is RescalingIntQuant
        and type(tensor_quant.scaling_impl) is ParameterFromRuntimeStatsScaling
        and type(tensor_quant.zero_point_impl) is ZeroZeroPoint
        and type(tensor_quant.msb_clamp_bit_width_impl) is BitWidthConst
    )


class _QuantRNNCell(nn.Module):
    """The time loop of one QuantRNN layer and direction (scriptable)."""

    __constants__ = ["reverse_input", "batch_first"]

    def __init__(
        self,
        act_fn: nn.Module,
        gate_acc_quant: nn.Module,
        output_quant: nn.Module,
        reverse_input: bool,
        batch_first: bool,
    ) -> None:
        super().__init__()
        self.act_fn = act_fn
        self.gate_acc_quant = gate_acc_quant
        self.output_quant = output_quant
        self.reverse_input = reverse_input
        self.batch_first = batch_first

    def forward(
        self,
        quant_input: Tensor,
        quant_state: Tensor,
        quant_weight_ih: Tensor,
        quant_weight_hh: Tensor,
        quant_bias: Tensor,
    ) -> List[_OptTuple]:
        inputs = quant_input.unbind(1 if self.batch_first else 0)
        steps = len(inputs)
        outputs: List[_OptTuple] = []
        gate_acc_frozen = self.gate_acc_quant.frozen()
        output_frozen = self.output_quant.frozen()
        for i in range(steps):
            t = steps - 1 - i if self.reverse_input else i
            gate_ih = F.linear(inputs[t], quant_weight_ih)
            gate_hh = F.linear(quant_state, quant_weight_hh)
            gate = self.gate_acc_quant(gate_ih + gate_hh + quant_bias, gate_acc_frozen)[0]
            gate = self.act_fn(gate)
            value, scale, zero_point, bit_width = self.output_quant(gate, output_frozen)
            outputs.append((value, scale, zero_point, bit_width))
            quant_state = value
        return outputs


class _QuantLSTMCell(nn.Module):
    """The time loop of one QuantLSTM layer and direction (scriptable). Gates i, f, g, o as in
    nn.LSTM; with cifg the forget gate is 1 - i, the 1 on the input sigmoid's grid."""

    __constants__ = ["reverse_input", "batch_first", "cifg"]

    def __init__(
        self,
        quants: Dict[str, nn.Module],
        reverse_input: bool,
        batch_first: bool,
        cifg: bool,
    ) -> None:
        super().__init__()
        self.output_quant = quants["output_quant"]
        self.cell_state_quant = quants["cell_state_quant"]
        self.input_acc_quant = quants["input_acc_quant"]
        self.forget_acc_quant = quants["forget_acc_quant"]
        self.cell_acc_quant = quants["cell_acc_quant"]
        self.output_acc_quant = quants["output_acc_quant"]
        self.input_sigmoid_quant = quants["input_sigmoid_quant"]
        self.forget_sigmoid_quant = quants["forget_sigmoid_quant"]
        self.cell_tanh_quant = quants["cell_tanh_quant"]
        self.output_sigmoid_quant = quants["output_sigmoid_quant"]
        self.hidden_state_tanh_quant = quants["hidden_state_tanh_quant"]
        self.reverse_input = reverse_input
        self.batch_first = batch_first
        self.cifg = cifg

    def forward(
        self,
        quant_input: Tensor,
        quant_hidden_state: Tensor,
        quant_cell_state: Tensor,
        weights: List[Tensor],
        biases: List[Tensor],
    ) -> Tuple[List[_OptTuple], _OptTuple]:
        # weights: ii, if, ic, io, hi, hf, hc, ho; biases: input, forget, cell, output.
        w_ii, w_if, w_ic, w_io = weights[0], weights[1], weights[2], weights[3]
        w_hi, w_hf, w_hc, w_ho = weights[4], weights[5], weights[6], weights[7]
        b_i, b_f, b_c, b_o = biases[0], biases[1], biases[2], biases[3]
        inputs = quant_input.unbind(1 if self.batch_first else 0)
        steps = len(inputs)
        hidden_states: List[_OptTuple] = []
        cell_tuple: _OptTuple = (quant_cell_state, None, None, None)
        # Metadata fixed for the sequence (learned phase), else None: computed on every step.
        f_input_acc = self.input_acc_quant.frozen()
        f_forget_acc = self.forget_acc_quant.frozen()
        f_cell_acc = self.cell_acc_quant.frozen()
        f_output_acc = self.output_acc_quant.frozen()
        f_input_sigmoid = self.input_sigmoid_quant.frozen()
        f_forget_sigmoid = self.forget_sigmoid_quant.frozen()
        f_cell_tanh = self.cell_tanh_quant.frozen()
        f_output_sigmoid = self.output_sigmoid_quant.frozen()
        f_cell_state = self.cell_state_quant.frozen()
        f_hidden_tanh = self.hidden_state_tanh_quant.frozen()
        f_output = self.output_quant.frozen()
        for i in range(steps):
            t = steps - 1 - i if self.reverse_input else i
            x = inputs[t]
            h = quant_hidden_state
            input_gate = self.input_acc_quant(
                F.linear(x, w_ii) + F.linear(h, w_hi) + b_i, f_input_acc
            )[0]
            input_gate = self.input_sigmoid_quant(input_gate, f_input_sigmoid)[0]
            if self.cifg:
                # The input sigmoid's quantizer alone (its statistics see the ones, as in
                # Brevitas), so that 1 lies on the input gate's grid.
                ones = self.input_sigmoid_quant.tensor_quant_only(torch.ones_like(input_gate))[0]
                forget_gate = ones - input_gate
            else:
                forget_gate = self.forget_acc_quant(
                    F.linear(x, w_if) + F.linear(h, w_hf) + b_f, f_forget_acc
                )[0]
                forget_gate = self.forget_sigmoid_quant(forget_gate, f_forget_sigmoid)[0]
            cell_gate = self.cell_acc_quant(
                F.linear(x, w_ic) + F.linear(h, w_hc) + b_c, f_cell_acc
            )[0]
            cell_gate = self.cell_tanh_quant(cell_gate, f_cell_tanh)[0]
            out_gate = self.output_acc_quant(
                F.linear(x, w_io) + F.linear(h, w_ho) + b_o, f_output_acc
            )[0]
            out_gate = self.output_sigmoid_quant(out_gate, f_output_sigmoid)[0]
            forget_cell = self.cell_state_quant(forget_gate * quant_cell_state, f_cell_state)[0]
            input_cell = self.cell_state_quant(input_gate * cell_gate, f_cell_state)[0]
            c_value, c_scale, c_zero_point, c_bit_width = self.cell_state_quant(
                forget_cell + input_cell, f_cell_state
            )
            cell_tuple = (c_value, c_scale, c_zero_point, c_bit_width)
            hidden_tanh = self.hidden_state_tanh_quant(c_value, f_hidden_tanh)[0]
            h_value, h_scale, h_zero_point, h_bit_width = self.output_quant(
                out_gate * hidden_tanh, f_output
            )
            hidden_states.append((h_value, h_scale, h_zero_point, h_bit_width))
            quant_hidden_state = h_value
            quant_cell_state = c_value
        return hidden_states, cell_tuple


class _CellProxies(nn.Module):
    """``layer.cell``: the activation proxies of a layer under Brevitas's names (its state_dict
    keys), and the loop's settings. What runs is the fast cell built from them."""

    def __init__(self, reverse_input: bool, batch_first: bool, **proxies: nn.Module) -> None:
        super().__init__()
        for name, proxy in proxies.items():
            setattr(self, name, proxy)
        self.reverse_input = reverse_input
        self.batch_first = batch_first
