"""Quantized recurrent layers (Brevitas's brevitas.nn.quant_rnn): QuantRNN and QuantLSTM.

The module tree, the constructor keywords, the order in which quantizers are called (which
matters: activation quantizers collect statistics call by call) and the state_dict keys are
Brevitas 0.12's, so its checkpoints and numbers carry over:

* a stack (``QuantRNN``/``QuantLSTM``) holds ``layers[l][d]``, one layer per layer and direction;
* a layer quantizes its input (``io_quant``, first layer only), its gate weights (``GateWeight``:
  input-to-hidden and hidden-to-hidden share one weight quantizer per gate) and biases
  (``GateParams``), its initial states, then runs the time loop, which quantizes every gate
  accumulator, activation, cell state and output;
* ``io_quant`` is one proxy for every layer and direction (and ``cell_state_quant`` too, with
  ``shared_cell_state_quant``): one scale for the whole stack's outputs, as in Brevitas.

The time loop is a small module of its own (``_QuantRNNCell``/``_QuantLSTMCell``) holding the
activation quantizers' fused modules, as Brevitas's "fast cell" does; it is scriptable, and with
``BREVITAS_JIT=1`` (where those fused modules are already ScriptModules, shared rather than
copied by scripting) each layer runs it compiled, with no Python per time step. The stack itself
shares proxies between layers and is not scripted (``__prepare_scriptable__`` says so).

Deliberate differences from Brevitas 0.12: keywords no quantizer takes are errors; an initial
state of the wrong shape, an input of the wrong rank or size and the combinations Brevitas would
fail on later are refused up front with errors naming the argument; ``hx[l * num_directions +
d]`` is the state of layer l, direction d also without ``bidirectional`` (Brevitas reads
``hx[2 * l + d]``, which fails for stacked unidirectional layers); float-checkpoint keys are
remapped only under the layer's own prefix; ``reset_parameters`` makes Brevitas's random draws
but writes them only into the gate weights and biases, not into quantizer parameters whose name
contains "gate" (see its docstring).
"""

import math
import re
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brevitas_cpp import config
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerTensorFloat,
    Int32Bias,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor, _unpack_quant_tensor

from .mixin import QuantBiasMixin, QuantWeightMixin
from .quant_activation import QuantIdentity, QuantSigmoid, QuantTanh

__all__ = ["GateWeight", "GateParams", "QuantRNN", "QuantLSTM"]

# What a quantizer gives the time loop: the value and, when quantized, its metadata.
_OptTuple = Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]


# Marks the gate weights and biases (Parameter attribute): the tensors reset_parameters draws.
_GATE_TENSOR = "_brevitas_cpp_gate_tensor"


class GateWeight(QuantWeightMixin, nn.Module):
    """One gate's weight (output_features x input_features) and its weight quantizer."""

    def __init__(
        self,
        input_features: int,
        output_features: int,
        weight_quant: Any,
        dtype: Optional[torch.dtype],
        device: Any,
        **kwargs: Any,
    ) -> None:
        nn.Module.__init__(self)
        # randn: Brevitas draws the placeholder (overwritten by reset_parameters) from the global
        # generator, so a seeded construction gives the same weights only if we draw it too.
        self.weight = nn.Parameter(
            torch.randn(output_features, input_features, dtype=dtype, device=device)
        )
        setattr(self.weight, _GATE_TENSOR, True)
        QuantWeightMixin.__init__(self, weight_quant=weight_quant, **kwargs)

    @property
    def output_channel_dim(self) -> int:
        return 0

    @property
    def out_channels(self) -> int:
        return self.weight.size(0)

    def forward(self) -> Union[Tensor, QuantTensor]:
        return self.weight_quant(self.weight)


class GateParams(QuantBiasMixin, nn.Module):
    """A gate's bias and bias quantizer, its input-to-hidden weight (possibly another layer's,
    when shared) and its hidden-to-hidden weight, which reuses the input weight's quantizer."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        weight_quant: Any,
        bias_quant: Any,
        input_weight: Optional[GateWeight],
        dtype: Optional[torch.dtype],
        device: Any,
        weight_kwargs: Dict[str, Any],
        **kwargs: Any,
    ) -> None:
        nn.Module.__init__(self)
        if bias:
            self.bias = nn.Parameter(torch.randn(hidden_size, dtype=dtype, device=device))
            setattr(self.bias, _GATE_TENSOR, True)
        else:
            self.bias = None
        QuantBiasMixin.__init__(self, bias_quant, **kwargs)
        if input_weight is None:
            input_weight = GateWeight(
                input_size, hidden_size, weight_quant, dtype, device, **weight_kwargs
            )
        self.input_weight = input_weight
        self.hidden_weight = GateWeight(
            hidden_size, hidden_size, input_weight.weight_quant, dtype, device
        )


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


def _fused(proxy: nn.Module) -> nn.Module:
    """What the time loop calls for an activation proxy: its activation fused with its quantizer
    (Brevitas's fast cell calls the same module), or _NoQuant when it has neither."""
    fused = proxy.fused_activation_quant_proxy
    return _NoQuant() if fused is None else fused


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
        for i in range(steps):
            t = steps - 1 - i if self.reverse_input else i
            gate_ih = F.linear(inputs[t], quant_weight_ih)
            gate_hh = F.linear(quant_state, quant_weight_hh)
            gate = self.gate_acc_quant(gate_ih + gate_hh + quant_bias)[0]
            gate = self.act_fn(gate)
            value, scale, zero_point, bit_width = self.output_quant(gate)
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
        for i in range(steps):
            t = steps - 1 - i if self.reverse_input else i
            x = inputs[t]
            h = quant_hidden_state
            input_gate = self.input_acc_quant(F.linear(x, w_ii) + F.linear(h, w_hi) + b_i)[0]
            input_gate = self.input_sigmoid_quant(input_gate)[0]
            if self.cifg:
                # The input sigmoid's quantizer alone (its statistics see the ones, as in
                # Brevitas), so that 1 lies on the input gate's grid.
                ones = self.input_sigmoid_quant.tensor_quant(torch.ones_like(input_gate))[0]
                forget_gate = ones - input_gate
            else:
                forget_gate = self.forget_acc_quant(F.linear(x, w_if) + F.linear(h, w_hf) + b_f)[0]
                forget_gate = self.forget_sigmoid_quant(forget_gate)[0]
            cell_gate = self.cell_acc_quant(F.linear(x, w_ic) + F.linear(h, w_hc) + b_c)[0]
            cell_gate = self.cell_tanh_quant(cell_gate)[0]
            out_gate = self.output_acc_quant(F.linear(x, w_io) + F.linear(h, w_ho) + b_o)[0]
            out_gate = self.output_sigmoid_quant(out_gate)[0]
            forget_cell = self.cell_state_quant(forget_gate * quant_cell_state)[0]
            input_cell = self.cell_state_quant(input_gate * cell_gate)[0]
            c_value, c_scale, c_zero_point, c_bit_width = self.cell_state_quant(
                forget_cell + input_cell
            )
            cell_tuple = (c_value, c_scale, c_zero_point, c_bit_width)
            hidden_tanh = self.hidden_state_tanh_quant(c_value)[0]
            h_value, h_scale, h_zero_point, h_bit_width = self.output_quant(out_gate * hidden_tanh)
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


def _split_kwargs(
    layer_name: str, kwargs: Dict[str, Any], prefixes: Tuple[str, ...]
) -> Dict[str, Dict[str, Any]]:
    """kwargs by quantizer prefix (longest match first); a keyword with no prefix is an error."""
    routed: Dict[str, Dict[str, Any]] = {p: {} for p in prefixes}
    for name, value in kwargs.items():
        match = max((p for p in prefixes if name.startswith(p)), key=len, default=None)
        if match is None:
            raise TypeError(
                f"{layer_name}: unexpected keyword argument {name}={value!r}. Keywords beyond the "
                f"layer's own arguments set quantizer attributes and must start with a quantizer "
                f"prefix; accepted prefixes: {', '.join(repr(p) for p in prefixes)}"
            )
        routed[match][name] = value
    return routed


def _act_proxy(
    layer_name: str, layer_class: type, quant: Any, prefix: str, kwargs: Dict[str, Any]
) -> nn.Module:
    """The proxy of an activation quantizer built as Brevitas builds it (an inner QuantIdentity,
    QuantSigmoid or QuantTanh whose act_quant it is), configured by the ``prefix`` keywords."""
    unprefixed = {k[len(prefix) :]: v for k, v in kwargs.items()}
    try:
        return layer_class(quant, **unprefixed).act_quant
    except TypeError as error:
        raise TypeError(
            f"{layer_name}: the {prefix}* keywords {sorted(kwargs)} configure the "
            f"{layer_class.__name__} quantizer {getattr(quant, '__name__', type(quant).__name__)}"
            f": {error}"
        ) from error


def _check_bool(layer_name: str, **flags: Any) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(
                f"{layer_name}: {name} must be a bool, got {value!r} ({type(value).__name__})"
            )


def _check_size(layer_name: str, **sizes: Any) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{layer_name}: {name} must be a positive int, got {value!r}")


class _QuantRecurrentLayer(nn.Module):
    """What the RNN and LSTM layers share: input and state quantization, packing of the outputs
    (Brevitas's QuantRecurrentLayerMixin) and the fast-cell cache."""

    def _init_layer(
        self,
        io_quant: nn.Module,
        input_size: int,
        hidden_size: int,
        reverse_input: bool,
        quantize_output_only: bool,
        shared_input_hidden_weights: bool,
        return_quant_tensor: bool,
    ) -> None:
        self.io_quant = io_quant
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.reverse_input = reverse_input
        self.quantize_output_only = quantize_output_only
        self.shared_input_hidden_weights = shared_input_hidden_weights
        self.return_quant_tensor = return_quant_tensor
        self.accept_quant_tensor = True
        # Brevitas's switch between a loop calling the proxies and one calling their fused
        # modules; the two compute the same numbers, and this layer always runs the latter.
        self.fast_mode = True
        self.__dict__["_fast_cell_cache"] = None

    def __getstate__(self) -> Dict[str, Any]:
        # The cached loop (possibly a ScriptModule) is rebuilt on demand, never copied.
        state = dict(self.__dict__)
        state["_fast_cell_cache"] = None
        return state

    def reset_parameters(self) -> None:
        """U(-1/sqrt(hidden), 1/sqrt(hidden)) for the gate weights and biases, as nn.RNN.

        Brevitas 0.12 draws for every parameter whose name contains "gate" and so also
        overwrites quantizer parameters under such names, e.g. the learned scale of QuantRNN's
        ``gate_acc_quant`` (which then starts its learned phase at U(-1/sqrt(h), 1/sqrt(h)) times
        its statistic, negative half of the time: a scale brevitas_cpp's quantizer refuses).
        The same draws are made here, in the same order, so a seeded layer has Brevitas's
        weights, but only the gate weights and biases receive them."""
        std = 1.0 / math.sqrt(self.hidden_size)
        for name, param in self.named_parameters():
            if "gate" in name:
                # A gate weight may be reached through a shared quantizer's tracked list (a
                # shared direction's, too): Brevitas re-draws it there, and so does this.
                target = param if getattr(param, _GATE_TENSOR, False) else torch.empty_like(param)
                nn.init.uniform_(target, -std, std)

    def _cell_quants(self) -> Dict[str, nn.Module]:
        raise NotImplementedError

    def _make_cell(self, quants: Dict[str, nn.Module]) -> nn.Module:
        raise NotImplementedError

    def fast_cell(self) -> nn.Module:
        """The time loop over the current fused modules (rebuilt when a proxy rebuilt its
        quantizer, e.g. on sharing or state_dict load); scripted with BREVITAS_JIT=1."""
        quants = self._cell_quants()
        key = tuple(id(getattr(self.cell, name).fused_activation_quant_proxy) for name in quants)
        cache = self.__dict__.get("_fast_cell_cache")
        if cache is None or cache[0] != key:
            cell = self._make_cell({n: _fused(getattr(self.cell, n)) for n in quants})
            if config.JIT_ENABLED:
                cell = torch.jit.script(cell)
            cache = (key, cell)
            self.__dict__["_fast_cell_cache"] = cache
        return cache[1]

    def maybe_quantize_input(self, inp: Any) -> Any:
        if isinstance(inp, nn.utils.rnn.PackedSequence):
            raise RuntimeError(f"{type(self).__name__}: PackedSequence input is not supported")
        if self.quantize_output_only:
            return inp
        return self.io_quant(inp)

    def maybe_quantize_state(
        self, inp: Tensor, state: Optional[Tensor], quant: nn.Module
    ) -> Tensor:
        if state is None:
            batch_size = inp.size(0) if self.cell.batch_first else inp.size(1)
            return torch.zeros(batch_size, self.hidden_size, dtype=inp.dtype, device=inp.device)
        return _unpack_quant_tensor(quant(state))

    def pack_quant_outputs(self, quant_outputs: List[_OptTuple]) -> Any:
        seq_dim = 1 if self.cell.batch_first else 0
        if self.return_quant_tensor and self.io_quant.is_quant_enabled:
            outputs = [
                IntQuantTensor(
                    torch.unsqueeze(o[0], dim=seq_dim),
                    o[1],
                    o[2],
                    o[3],
                    self.io_quant.is_signed,
                    self.training,
                )
                for o in quant_outputs
            ]
        else:
            outputs = [torch.unsqueeze(o[0], dim=seq_dim) for o in quant_outputs]
        if self.reverse_input:
            outputs = list(reversed(outputs))
        # torch.cat of IntQuantTensors: in training the mean of their scales, as in Brevitas.
        return torch.cat(outputs, dim=seq_dim)

    def pack_quant_state(self, quant_state: _OptTuple, quant: nn.Module) -> Any:
        if self.return_quant_tensor and quant.is_quant_enabled:
            return IntQuantTensor(
                torch.unsqueeze(quant_state[0], dim=0),
                quant_state[1],
                quant_state[2],
                quant_state[3],
                quant.is_signed,
                self.training,
            )
        return torch.unsqueeze(quant_state[0], dim=0)

    @staticmethod
    def gate_params_fwd(gate: GateParams, quant_input: Any) -> Tuple[Any, Any, Any]:
        quant_weight_ih = gate.input_weight()
        quant_weight_hh = gate.hidden_weight()
        quant_bias = gate.bias_quant(gate.bias, quant_input, quant_weight_ih)
        return quant_weight_ih, quant_weight_hh, quant_bias

    @staticmethod
    def _bias_value(quant_bias: Any, like: Tensor) -> Tensor:
        if quant_bias is None:
            return torch.tensor(0.0, device=like.device)
        return _unpack_quant_tensor(quant_bias)


class _QuantRNNLayer(_QuantRecurrentLayer):
    """One layer and direction of QuantRNN."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        batch_first: bool,
        weight_quant: Any,
        bias_quant: Any,
        io_quant: Any,
        gate_acc_quant: Any,
        reverse_input: bool,
        quantize_output_only: bool,
        shared_input_hidden_weights: bool,
        return_quant_tensor: bool,
        nonlinearity: str,
        dtype: Optional[torch.dtype],
        device: Any,
        routed: Dict[str, Dict[str, Any]],
        input_weight: Optional[GateWeight] = None,
    ) -> None:
        nn.Module.__init__(self)
        name = "QuantRNN"
        io_proxy = _act_proxy(name, QuantIdentity, io_quant, "io_", routed["io_"])
        acc_proxy = _act_proxy(
            name, QuantIdentity, gate_acc_quant, "gate_acc_quant_", routed["gate_acc_quant_"]
        )
        act_fn = nn.Tanh() if nonlinearity == "tanh" else nn.ReLU()
        cell = _CellProxies(
            reverse_input,
            batch_first,
            act_fn=act_fn,
            gate_acc_quant=acc_proxy,
            output_quant=io_proxy,
        )
        self.cell = cell
        self._init_layer(
            io_proxy,
            input_size,
            hidden_size,
            reverse_input,
            quantize_output_only,
            shared_input_hidden_weights,
            return_quant_tensor,
        )
        self.gate_params = GateParams(
            input_size,
            hidden_size,
            bias,
            weight_quant,
            bias_quant,
            input_weight,
            dtype,
            device,
            routed["weight_"],
            **routed["bias_"],
        )
        self.reset_parameters()

    @property
    def weights_to_share(self) -> Dict[str, GateWeight]:
        if self.shared_input_hidden_weights:
            return {"input_weight": self.gate_params.input_weight}
        return {}

    @property
    def quantizers_to_share(self) -> Dict[str, nn.Module]:
        return {"io_quant": self.io_quant}

    def _first_gate(self) -> GateParams:
        return self.gate_params

    def _cell_quants(self) -> Dict[str, nn.Module]:
        return {"gate_acc_quant": self.cell.gate_acc_quant, "output_quant": self.cell.output_quant}

    def _make_cell(self, quants: Dict[str, nn.Module]) -> nn.Module:
        return _QuantRNNCell(
            self.cell.act_fn,
            quants["gate_acc_quant"],
            quants["output_quant"],
            self.cell.reverse_input,
            self.cell.batch_first,
        )

    def forward(self, inp: Any, state: Optional[Tensor]) -> Tuple[Any, Any]:
        quant_input = self.maybe_quantize_input(inp)
        quant_weight_ih, quant_weight_hh, quant_bias = self.gate_params_fwd(
            self.gate_params, quant_input
        )
        quant_input_value = _unpack_quant_tensor(quant_input)
        bias_value = self._bias_value(quant_bias, quant_input_value)
        quant_state = self.maybe_quantize_state(quant_input_value, state, self.cell.output_quant)
        quant_outputs = self.fast_cell()(
            quant_input_value,
            quant_state,
            _unpack_quant_tensor(quant_weight_ih),
            _unpack_quant_tensor(quant_weight_hh),
            bias_value,
        )
        quant_output = self.pack_quant_outputs(quant_outputs)
        return quant_output, self.pack_quant_state(quant_outputs[-1], self.cell.output_quant)


_LSTM_GATES = ("input", "forget", "cell", "output")


class _QuantLSTMLayer(_QuantRecurrentLayer):
    """One layer and direction of QuantLSTM."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        batch_first: bool,
        weight_quant: Any,
        bias_quant: Any,
        io_quant: Any,
        gate_acc_quant: Any,
        sigmoid_quant: Any,
        tanh_quant: Any,
        cell_state_quant: Any,
        reverse_input: bool,
        quantize_output_only: bool,
        cifg: bool,
        shared_input_hidden_weights: bool,
        shared_cell_state_quant: bool,
        shared_intra_layer_weight_quant: bool,
        shared_intra_layer_gate_acc_quant: bool,
        dtype: Optional[torch.dtype],
        device: Any,
        return_quant_tensor: bool,
        routed: Dict[str, Dict[str, Any]],
        input_input_weight: Optional[GateWeight] = None,
        input_forget_weight: Optional[GateWeight] = None,
        input_cell_weight: Optional[GateWeight] = None,
        input_output_weight: Optional[GateWeight] = None,
    ) -> None:
        nn.Module.__init__(self)
        name = "QuantLSTM"
        io_proxy = _act_proxy(name, QuantIdentity, io_quant, "io_", routed["io_"])
        cell_proxy = _act_proxy(
            name, QuantIdentity, cell_state_quant, "cell_state_", routed["cell_state_"]
        )

        def acc() -> nn.Module:
            return _act_proxy(name, QuantIdentity, gate_acc_quant, "gate_acc_", routed["gate_acc_"])

        def sigmoid() -> nn.Module:
            return _act_proxy(name, QuantSigmoid, sigmoid_quant, "sigmoid_", routed["sigmoid_"])

        def tanh() -> nn.Module:
            return _act_proxy(name, QuantTanh, tanh_quant, "tanh_", routed["tanh_"])

        # Built in Brevitas's order: a shared proxy (shared_intra_layer_gate_acc_quant) then
        # serves its layers in the same order.
        input_acc = acc()
        if shared_intra_layer_gate_acc_quant:
            forget_acc = cell_acc = output_acc = input_acc
        else:
            cell_acc = acc()
            output_acc = acc()
            forget_acc = input_acc if cifg else acc()
        input_sigmoid = sigmoid()
        cell_tanh = tanh()
        output_sigmoid = sigmoid()
        hidden_tanh = tanh()
        forget_sigmoid = input_sigmoid if cifg else sigmoid()
        self.cell = _CellProxies(
            reverse_input,
            batch_first,
            output_quant=io_proxy,
            cell_state_quant=cell_proxy,
            input_acc_quant=input_acc,
            forget_acc_quant=forget_acc,
            cell_acc_quant=cell_acc,
            output_acc_quant=output_acc,
            input_sigmoid_quant=input_sigmoid,
            forget_sigmoid_quant=forget_sigmoid,
            cell_tanh_quant=cell_tanh,
            output_sigmoid_quant=output_sigmoid,
            hidden_state_tanh_quant=hidden_tanh,
        )
        self.cell.cifg = cifg
        self._init_layer(
            io_proxy,
            input_size,
            hidden_size,
            reverse_input,
            quantize_output_only,
            shared_input_hidden_weights,
            return_quant_tensor,
        )

        def gate(weight_quant: Any, input_weight: Optional[GateWeight]) -> GateParams:
            return GateParams(
                input_size,
                hidden_size,
                bias,
                weight_quant,
                bias_quant,
                input_weight,
                dtype,
                device,
                routed["weight_"],
                **routed["bias_"],
            )

        # Brevitas hands the shared weights over under crossed names: the input gate gets
        # input_forget_weight and the forget gate input_input_weight. With
        # shared_input_hidden_weights the reverse direction's input and forget gates therefore
        # use the forward direction's forget and input weights; kept, for its numbers.
        self.input_gate_params = gate(weight_quant, input_forget_weight)
        if shared_intra_layer_weight_quant:
            weight_quant = self.input_gate_params.input_weight.weight_quant
        self.forget_gate_params = None if cifg else gate(weight_quant, input_input_weight)
        self.cell_gate_params = gate(weight_quant, input_cell_weight)
        self.output_gate_params = gate(weight_quant, input_output_weight)
        self.shared_cell_state_quant = shared_cell_state_quant
        self.cifg = cifg
        self.reset_parameters()

    @property
    def weights_to_share(self) -> Dict[str, GateWeight]:
        if not self.shared_input_hidden_weights:
            return {}
        out = {
            "input_input_weight": self.input_gate_params.input_weight,
            "input_cell_weight": self.cell_gate_params.input_weight,
            "input_output_weight": self.output_gate_params.input_weight,
        }
        if not self.cifg:
            out["input_forget_weight"] = self.forget_gate_params.input_weight
        return out

    def _first_gate(self) -> GateParams:
        return self.input_gate_params

    @property
    def quantizers_to_share(self) -> Dict[str, nn.Module]:
        shared = {"io_quant": self.io_quant}
        if self.shared_cell_state_quant:
            shared["cell_state_quant"] = self.cell.cell_state_quant
        return shared

    def _cell_quants(self) -> Dict[str, nn.Module]:
        names = (
            "output_quant",
            "cell_state_quant",
            "input_acc_quant",
            "forget_acc_quant",
            "cell_acc_quant",
            "output_acc_quant",
            "input_sigmoid_quant",
            "forget_sigmoid_quant",
            "cell_tanh_quant",
            "output_sigmoid_quant",
            "hidden_state_tanh_quant",
        )
        return {n: getattr(self.cell, n) for n in names}

    def _make_cell(self, quants: Dict[str, nn.Module]) -> nn.Module:
        return _QuantLSTMCell(quants, self.cell.reverse_input, self.cell.batch_first, self.cifg)

    def forward(
        self, inp: Any, hidden_state: Optional[Tensor], cell_state: Optional[Tensor]
    ) -> Tuple[Any, Any, Any]:
        quant_input = self.maybe_quantize_input(inp)
        quant_input_value = _unpack_quant_tensor(quant_input)
        # Brevitas's order: input, cell, output, then forget (the input gate's again with cifg).
        w_ii, w_hi, b_i = self.gate_params_fwd(self.input_gate_params, quant_input)
        w_ic, w_hc, b_c = self.gate_params_fwd(self.cell_gate_params, quant_input)
        w_io, w_ho, b_o = self.gate_params_fwd(self.output_gate_params, quant_input)
        forget_params = self.input_gate_params if self.cifg else self.forget_gate_params
        w_if, w_hf, b_f = self.gate_params_fwd(forget_params, quant_input)
        biases = [self._bias_value(b, quant_input_value) for b in (b_i, b_f, b_c, b_o)]
        quant_hidden_state = self.maybe_quantize_state(
            quant_input_value, hidden_state, self.cell.output_quant
        )
        quant_cell_state = self.maybe_quantize_state(
            quant_input_value, cell_state, self.cell.cell_state_quant
        )
        weights = [
            _unpack_quant_tensor(w) for w in (w_ii, w_if, w_ic, w_io, w_hi, w_hf, w_hc, w_ho)
        ]
        hidden_states, last_cell = self.fast_cell()(
            quant_input_value, quant_hidden_state, quant_cell_state, weights, biases
        )
        quant_outputs = self.pack_quant_outputs(hidden_states)
        quant_hidden = self.pack_quant_state(hidden_states[-1], self.cell.output_quant)
        quant_cell = self.pack_quant_state(last_cell, self.cell.cell_state_quant)
        return quant_outputs, quant_hidden, quant_cell


_FLOAT_KEY = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)(_reverse)?$")


class QuantRecurrentStackBase(nn.Module):
    """``layers[l][d]``: the layers of every depth and direction. The quantizers of the first
    forward layer that are shared (``io_quant``, and the LSTM's cell-state quantizer) serve all
    later layers and directions."""

    _layer_name = "QuantRecurrentStackBase"
    _prefixes: Tuple[str, ...] = ()

    def __init__(
        self,
        layer_impl: type,
        input_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        batch_first: bool,
        io_quant: Any,
        shared_input_hidden_weights: bool,
        dtype: Optional[torch.dtype],
        device: Any,
        return_quant_tensor: bool,
        kwargs: Dict[str, Any],
        **layer_kwargs: Any,
    ) -> None:
        super().__init__()
        name = self._layer_name
        _check_size(name, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        _check_bool(
            name,
            bidirectional=bidirectional,
            batch_first=batch_first,
            shared_input_hidden_weights=shared_input_hidden_weights,
            return_quant_tensor=return_quant_tensor,
        )
        if shared_input_hidden_weights and not bidirectional:
            raise RuntimeError(
                f"{name}: shared_input_hidden_weights=True shares the input weights between "
                f"the two directions and requires bidirectional=True"
            )
        if return_quant_tensor and io_quant is None:
            raise RuntimeError(
                f"{name}: return_quant_tensor=True requires an output quantizer (io_quant != None)"
            )
        routed = _split_kwargs(name, kwargs, self._prefixes)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.batch_first = batch_first
        self.num_directions = 2 if bidirectional else 1
        shared: Dict[str, Any] = {"io_quant": io_quant}
        layers = []
        for layer in range(num_layers):
            layer_input_size = input_size if layer == 0 else hidden_size * self.num_directions
            common = dict(
                input_size=layer_input_size,
                hidden_size=hidden_size,
                batch_first=batch_first,
                quantize_output_only=bool(layer),
                shared_input_hidden_weights=shared_input_hidden_weights,
                dtype=dtype,
                device=device,
                # Inner layers return QuantTensors: the next layer's bias scale needs theirs.
                return_quant_tensor=return_quant_tensor or layer < num_layers - 1,
            )
            # Quantizers already built (shared) replace the classes the user passed.
            common.update({**layer_kwargs, **shared})
            left_to_right = layer_impl(reverse_input=False, routed=routed, **common)
            directions = [left_to_right]
            # The first forward layer's shared quantizers serve every later layer: proxies
            # take no keywords.
            shared.update(left_to_right.quantizers_to_share)
            common.update(shared)
            routed = self._routed(routed, shared)
            if bidirectional:
                right_to_left = layer_impl(
                    reverse_input=True,
                    routed=routed,
                    **left_to_right.weights_to_share,
                    **common,
                )
                directions.append(right_to_left)
            layers.append(nn.ModuleList(directions))
        self.layers = nn.ModuleList(layers)
        first = self.layers[0][0]
        bias_quant = first._first_gate().bias_quant
        if (
            first._first_gate().bias is not None
            and bias_quant.is_quant_enabled
            and getattr(bias_quant, "requires_input_scale", False)
            and not first.io_quant.is_quant_enabled
        ):
            raise RuntimeError(
                f"{name}: bias_quant={getattr(bias_quant.quant_injector, '__name__', '?')} takes "
                f"its scale from the input (input scale * weight scale), but io_quant=None leaves "
                f"the input unquantized; give io_quant a quantizer, or use bias_quant=None or a "
                f"bias quantizer with its own scale"
            )

    @staticmethod
    def _routed(
        routed: Dict[str, Dict[str, Any]], shared: Dict[str, Any]
    ) -> Dict[str, Dict[str, Any]]:
        # A proxy already built (shared) takes no keywords: they configured it when it was built.
        out = dict(routed)
        out["io_"] = {}
        if "cell_state_quant" in shared:
            out["cell_state_"] = {}
        return out

    def __prepare_scriptable__(self) -> "QuantRecurrentStackBase":
        raise script_error(
            self,
            "its layers and directions share quantizers (io_quant, and the cell-state "
            "quantizer), which scripting would copy apart",
            "The time loop is scriptable on its own (layer.fast_cell()), and with "
            "BREVITAS_JIT=1 every layer runs it compiled; or trace the model.",
        )

    def _check_state(self, inp: Any, state: Optional[Tensor], name: str) -> None:
        if state is None:
            return
        value = _unpack_quant_tensor(inp)
        batch = value.size(0) if self.batch_first else value.size(1)
        expected = (self.num_layers * self.num_directions, batch, self.hidden_size)
        if tuple(state.shape) != expected:
            raise ValueError(
                f"{self._layer_name}: {name} must have shape (num_layers * num_directions, "
                f"batch, hidden_size) = {expected}, got {tuple(state.shape)}"
            )

    def _check_input(self, inp: Any) -> None:
        if isinstance(inp, nn.utils.rnn.PackedSequence):
            raise RuntimeError(f"{self._layer_name}: PackedSequence input is not supported")
        if not isinstance(inp, (Tensor, QuantTensor)):
            raise TypeError(
                f"{self._layer_name}: input must be a Tensor or a QuantTensor, got "
                f"{type(inp).__name__}"
            )
        value = _unpack_quant_tensor(inp)
        layout = "(batch, seq, input_size)" if self.batch_first else "(seq, batch, input_size)"
        if value.dim() != 3 or value.size(-1) != self.input_size:
            raise ValueError(
                f"{self._layer_name}: input must have shape {layout} with input_size="
                f"{self.input_size}, got {tuple(value.shape)}"
            )

    def _state_index(self, layer: int, direction: int) -> int:
        return layer * self.num_directions + direction

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # An nn.RNN / nn.LSTM checkpoint: weight_ih_l0, bias_hh_l1_reverse, ...
        for key in [k for k in state_dict if k.startswith(prefix)]:
            match = _FLOAT_KEY.match(key[len(prefix) :])
            if match is None:
                continue
            kind, index, reverse = match.group(1), int(match.group(2)), match.group(3)
            value = state_dict.pop(key)
            layer_prefix = f"{prefix}layers.{index}.{1 if reverse else 0}."
            self._load_float_tensor(state_dict, layer_prefix, kind, value)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _load_float_tensor(
        self, state_dict: Dict[str, Any], layer_prefix: str, kind: str, value: Tensor
    ) -> None:
        raise NotImplementedError


def _add_bias(state_dict: Dict[str, Any], key: str, hidden_size: int, value: Tensor) -> None:
    # bias_ih + bias_hh, summed into zeros of the default dtype as Brevitas does.
    if key not in state_dict:
        state_dict[key] = torch.zeros(hidden_size)
    state_dict[key].add_(value)


def _cat_if_many(parts: List[Any], dim: int) -> Any:
    """torch.cat of the per-direction or per-layer results, or the one result itself (a lone
    QuantTensor keeps its metadata without going through the cat handler)."""
    return torch.cat(parts, dim=dim) if len(parts) > 1 else parts[0]


class QuantRNN(QuantRecurrentStackBase):
    """Brevitas's QuantRNN: an Elman RNN, h' = act(W_ih x + W_hh h + b), with the weights, the
    gate accumulator (``gate_acc_quant``) and the input and outputs (``io_quant``) quantized."""

    _layer_name = "QuantRNN"
    _prefixes = ("weight_", "bias_", "io_", "gate_acc_quant_")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: Optional[bool] = True,
        batch_first: bool = False,
        bidirectional: bool = False,
        weight_quant: Any = Int8WeightPerTensorFloat,
        bias_quant: Any = Int32Bias,
        io_quant: Any = Int8ActPerTensorFloat,
        gate_acc_quant: Any = Int8ActPerTensorFloat,
        shared_input_hidden_weights: bool = False,
        return_quant_tensor: bool = False,
        dtype: Optional[torch.dtype] = None,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"QuantRNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        super().__init__(
            _QuantRNNLayer,
            input_size,
            hidden_size,
            num_layers,
            bidirectional,
            batch_first,
            io_quant,
            shared_input_hidden_weights,
            dtype,
            device,
            return_quant_tensor,
            kwargs,
            nonlinearity=nonlinearity,
            bias=bool(bias),
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            gate_acc_quant=gate_acc_quant,
        )

    def forward(self, inp: Any, hx: Optional[Tensor] = None) -> Tuple[Any, Any]:
        self._check_input(inp)
        self._check_state(inp, hx, "hx")
        output_states = []
        out = inp
        for index, layer in enumerate(self.layers):
            dir_outputs, dir_states = [], []
            for direction, layer_dir in enumerate(layer):
                state = hx[self._state_index(index, direction)] if hx is not None else None
                out, out_state = layer_dir(inp, state)
                dir_outputs.append(out)
                dir_states.append(out_state)
            out = _cat_if_many(dir_outputs, -1)
            output_states.append(_cat_if_many(dir_states, 0))
            inp = out
        return out, _cat_if_many(output_states, 0)

    def _load_float_tensor(
        self, state_dict: Dict[str, Any], layer_prefix: str, kind: str, value: Tensor
    ) -> None:
        gate = layer_prefix + "gate_params."
        if kind.startswith("bias"):
            _add_bias(state_dict, gate + "bias", self.hidden_size, value)
        else:
            which = "input" if kind == "weight_ih" else "hidden"
            state_dict[f"{gate}{which}_weight.weight"] = value


class QuantLSTM(QuantRecurrentStackBase):
    """Brevitas's QuantLSTM: gates i, f, g, o as in nn.LSTM, each with its weight quantizer,
    accumulator quantizer (``gate_acc_quant``) and quantized sigmoid or tanh; the cell state
    (``cell_state_quant``) and the input and outputs (``io_quant``) quantized."""

    _layer_name = "QuantLSTM"
    _prefixes = ("weight_", "bias_", "io_", "gate_acc_", "sigmoid_", "tanh_", "cell_state_")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: Optional[bool] = True,
        batch_first: bool = False,
        bidirectional: bool = False,
        weight_quant: Any = Int8WeightPerTensorFloat,
        bias_quant: Any = Int32Bias,
        io_quant: Any = Int8ActPerTensorFloat,
        gate_acc_quant: Any = Int8ActPerTensorFloat,
        sigmoid_quant: Any = Uint8ActPerTensorFloat,
        tanh_quant: Any = Int8ActPerTensorFloat,
        cell_state_quant: Any = Int8ActPerTensorFloat,
        coupled_input_forget_gates: bool = False,
        cat_output_cell_states: bool = True,
        shared_input_hidden_weights: bool = False,
        shared_intra_layer_weight_quant: bool = False,
        shared_intra_layer_gate_acc_quant: bool = False,
        shared_cell_state_quant: bool = True,
        return_quant_tensor: bool = False,
        device: Any = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs: Any,
    ) -> None:
        _check_bool(
            "QuantLSTM",
            coupled_input_forget_gates=coupled_input_forget_gates,
            cat_output_cell_states=cat_output_cell_states,
            shared_intra_layer_weight_quant=shared_intra_layer_weight_quant,
            shared_intra_layer_gate_acc_quant=shared_intra_layer_gate_acc_quant,
            shared_cell_state_quant=shared_cell_state_quant,
        )
        if cat_output_cell_states and cell_state_quant is not None and not shared_cell_state_quant:
            raise RuntimeError(
                "QuantLSTM: cat_output_cell_states=True concatenates the cell states of every "
                "layer and direction, which needs one cell-state quantizer for all of them "
                "(shared_cell_state_quant=True), or cat_output_cell_states=False"
            )
        if return_quant_tensor and cell_state_quant is None:
            raise RuntimeError(
                "QuantLSTM: return_quant_tensor=True requires a cell-state quantizer "
                "(cell_state_quant != None)"
            )
        super().__init__(
            _QuantLSTMLayer,
            input_size,
            hidden_size,
            num_layers,
            bidirectional,
            batch_first,
            io_quant,
            shared_input_hidden_weights,
            dtype,
            device,
            return_quant_tensor,
            kwargs,
            bias=bool(bias),
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            gate_acc_quant=gate_acc_quant,
            sigmoid_quant=sigmoid_quant,
            tanh_quant=tanh_quant,
            cell_state_quant=cell_state_quant,
            cifg=coupled_input_forget_gates,
            shared_intra_layer_weight_quant=shared_intra_layer_weight_quant,
            shared_intra_layer_gate_acc_quant=shared_intra_layer_gate_acc_quant,
            shared_cell_state_quant=shared_cell_state_quant,
        )
        self.cat_output_cell_states = cat_output_cell_states

    def forward(
        self, inp: Any, hx: Optional[Tensor] = None, cx: Optional[Tensor] = None
    ) -> Tuple[Any, Tuple[Any, Any]]:
        self._check_input(inp)
        self._check_state(inp, hx, "hx")
        self._check_state(inp, cx, "cx")
        hidden_states: List[Any] = []
        cell_states: List[Any] = []
        out = inp
        for index, layer in enumerate(self.layers):
            dir_outputs, dir_hidden, dir_cell = [], [], []
            for direction, layer_dir in enumerate(layer):
                at = self._state_index(index, direction)
                h0 = hx[at] if hx is not None else None
                c0 = cx[at] if cx is not None else None
                out, h, c = layer_dir(inp, h0, c0)
                dir_outputs.append(out)
                dir_hidden.append(h)
                dir_cell.append(c)
            out = _cat_if_many(dir_outputs, -1)
            hidden_states.append(_cat_if_many(dir_hidden, 0))
            if self.cat_output_cell_states:
                cell_states.append(_cat_if_many(dir_cell, 0))
            else:
                cell_states.extend(dir_cell)
            inp = out
        cells: Any = _cat_if_many(cell_states, 0) if self.cat_output_cell_states else cell_states
        return out, (_cat_if_many(hidden_states, 0), cells)

    def _load_float_tensor(
        self, state_dict: Dict[str, Any], layer_prefix: str, kind: str, value: Tensor
    ) -> None:
        hs = self.hidden_size
        for i, gate in enumerate(_LSTM_GATES):
            rows = value[i * hs : (i + 1) * hs]
            params = f"{layer_prefix}{gate}_gate_params."
            if kind.startswith("bias"):
                _add_bias(state_dict, params + "bias", hs, rows)
            else:
                which = "input" if kind == "weight_ih" else "hidden"
                state_dict[f"{params}{which}_weight.weight"] = rows
