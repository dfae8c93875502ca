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

Where the parts live (package-private modules next to this one): ``_rnn_gates`` (GateWeight,
GateParams), ``_rnn_cells`` (the time loops and ``layer.cell``), ``_rnn_layer_base`` (what a
layer of either kind shares), ``_rnn_layers`` (one RNN or LSTM layer and direction),
``_rnn_stack`` (the stack of layers, float-checkpoint loading), ``_rnn_args`` (keyword routing
and argument checks). This module keeps the public classes and names.

Deliberate differences from Brevitas 0.12: keywords no quantizer takes are errors; an initial
state of the wrong shape, an input of the wrong rank or size and the combinations Brevitas would
fail on later are refused up front with errors naming the argument; ``hx[l * num_directions +
d]`` is the state of layer l, direction d also without ``bidirectional`` (Brevitas reads
``hx[2 * l + d]``, which fails for stacked unidirectional layers); float-checkpoint keys are
remapped only under the layer's own prefix; ``reset_parameters`` makes Brevitas's random draws
but writes them only into the gate weights and biases, not into quantizer parameters whose name
contains "gate" (see its docstring).
"""

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerTensorFloat,
    Int32Bias,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor

from ._error_context import call_naming_layer
from ._rnn_args import _check_bool
from ._rnn_gates import GateParams, GateWeight
from ._rnn_layers import _LSTM_GATES, _QuantLSTMLayer, _QuantRNNLayer
from ._rnn_stack import QuantRecurrentStackBase, _add_bias, _cat_if_many

__all__ = [
    "GateParams",
    "GateWeight",
    "QuantLSTM",
    "QuantRNN",
    "QuantTupleLongDisabled",
    "QuantTupleLongEnabled",
    "QuantTupleShortDisabled",
    "QuantTupleShortEnabled",
]

# Brevitas's types of the per-step quantized outputs a layer collects (short: value, scale,
# zero point, bit width; long: two more), with quantization enabled or disabled.
QuantTupleShortEnabled = List[Tuple[Tensor, Tensor, Tensor, Tensor]]
QuantTupleShortDisabled = List[Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]]
QuantTupleLongEnabled = List[Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]]
QuantTupleLongDisabled = List[
    Tuple[
        Tensor,
        Optional[Tensor],
        Optional[Tensor],
        Optional[Tensor],
        Optional[Tensor],
        Optional[Tensor],
    ]
]


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
            io_quant,
            shared_input_hidden_weights,
            dtype,
            device,
            return_quant_tensor,
            batch_first=batch_first,
            nonlinearity=nonlinearity,
            bias=bool(bias),
            weight_quant=weight_quant,
            bias_quant=bias_quant,
            gate_acc_quant=gate_acc_quant,
            **kwargs,
        )

    def forward(self, inp: Any, hx: Optional[Tensor] = None) -> Tuple[Any, Any]:
        # An error names the stack (which does not script: no TorchScript path to keep apart);
        # the time loop inside it is not wrapped, so each step costs nothing more.
        return call_naming_layer(self, self._layer_forward, inp, hx)

    def _layer_forward(self, inp: Any, hx: Optional[Tensor]) -> Tuple[Any, Any]:
        self._check_input(inp)
        self._check_state(inp, hx, "hx")
        hx = _state_values(hx)
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
            io_quant,
            shared_input_hidden_weights,
            dtype,
            device,
            return_quant_tensor,
            batch_first=batch_first,
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
            **kwargs,
        )
        self.cat_output_cell_states = cat_output_cell_states

    def forward(
        self, inp: Any, hx: Optional[Any] = None, cx: Optional[Tensor] = None
    ) -> Tuple[Any, Tuple[Any, Any]]:
        """forward(inp, hx, cx) as Brevitas's QuantLSTM, or forward(inp, (hx, cx)) as
        nn.LSTM (so that a model written for nn.LSTM runs with this layer in its place)."""
        # An error names the stack (which does not script: no TorchScript path to keep apart);
        # the time loop inside it is not wrapped, so each step costs nothing more.
        return call_naming_layer(self, self._layer_forward, inp, hx, cx)

    def _layer_forward(
        self, inp: Any, hx: Optional[Any], cx: Optional[Tensor]
    ) -> Tuple[Any, Tuple[Any, Any]]:
        # (an IntQuantTensor is a NamedTuple too: a quantized hx is one state, not a pair)
        if isinstance(hx, (tuple, list)) and not isinstance(hx, QuantTensor):
            if cx is not None or len(hx) != 2:
                raise TypeError(
                    "QuantLSTM: the initial state is given either as hx and cx, or as one "
                    f"(hx, cx) pair as nn.LSTM takes it; got a {len(hx)}-element "
                    f"{type(hx).__name__}{' and cx' if cx is not None else ''}"
                )
            hx, cx = hx
        self._check_input(inp)
        self._check_state(inp, hx, "hx")
        self._check_state(inp, cx, "cx")
        hx, cx = _state_values(hx), _state_values(cx)
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


def _state_values(state: Optional[Any]) -> Optional[Tensor]:
    """The initial states as plain tensors, indexed per layer and direction (an IntQuantTensor
    is a NamedTuple, whose [i] is a field, not a slice); each layer requantizes its slice."""
    return _unpack_quant_tensor(state) if isinstance(state, QuantTensor) else state
