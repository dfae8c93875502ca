"""One layer and direction of QuantRNN (``_QuantRNNLayer``) and of QuantLSTM
(``_QuantLSTMLayer``): each builds its proxies and gate parameters in Brevitas's order (which
fixes the state_dict and the order in which shared quantizers see data) and runs its time
loop."""

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp.quant_tensor import _unpack_quant_tensor

from ._rnn_args import _act_proxy
from ._rnn_cells import _CellProxies, _QuantLSTMCell, _QuantRNNCell
from ._rnn_gates import GateParams, GateWeight
from ._rnn_layer_base import _QuantRecurrentLayer
from .quant_activation import QuantIdentity, QuantSigmoid, QuantTanh


class _QuantRNNLayer(_QuantRecurrentLayer):
    """One layer and direction of QuantRNN."""

    _layer_name = "QuantRNN"

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
        name = self._layer_name
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
            **routed["weight_"],
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
        quant_outputs = self.run_cell(
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

    _layer_name = "QuantLSTM"

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
        name = self._layer_name
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
                **routed["weight_"],
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
        hidden_states, last_cell = self.run_cell(
            quant_input_value, quant_hidden_state, quant_cell_state, weights, biases
        )
        quant_outputs = self.pack_quant_outputs(hidden_states)
        quant_hidden = self.pack_quant_state(hidden_states[-1], self.cell.output_quant)
        quant_cell = self.pack_quant_state(last_cell, self.cell.cell_state_quant)
        return quant_outputs, quant_hidden, quant_cell
