"""What one layer and direction of QuantRNN and QuantLSTM share (Brevitas's
QuantRecurrentLayerMixin): quantization of the input and the initial states, packing of the
time loop's outputs into Tensors or IntQuantTensors, the gate weights' initialisation and the
cache of the (possibly scripted) time loop."""

import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp import config
from brevitas_cpp.proxy.empty_batch import linked_to_parameters, statistics_paused
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor, _unpack_quant_tensor

from ._rnn_cells import _fused, _fused_key, _OptTuple
from ._rnn_gates import _GATE_TENSOR, GateParams


class _QuantRecurrentLayer(nn.Module):
    """What the RNN and LSTM layers share: input and state quantization, packing of the outputs
    (Brevitas's QuantRecurrentLayerMixin) and the fast-cell cache."""

    _layer_name = "QuantRecurrentLayer"  # the stack's name, in errors

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
        # The blocks _fused decides on are part of the key: replacing one (eager mode) rebuilds.
        key = tuple(
            _fused_key(getattr(self.cell, name).fused_activation_quant_proxy) for name in quants
        )
        cache = self.__dict__.get("_fast_cell_cache")
        if cache is None or cache[0] != key:
            cell = self._make_cell({n: _fused(getattr(self.cell, n)) for n in quants})
            if config.JIT_ENABLED:
                cell = torch.jit.script(cell)
            cache = (key, cell)
            self.__dict__["_fast_cell_cache"] = cache
        return cache[1]

    def run_cell(self, quant_input: Tensor, *args: Any) -> Any:
        """The time loop (fast_cell) on the quantized input and the other operands. An empty
        batch runs it with the cell's quantizers collecting no statistics, as BatchNorm does
        (see brevitas_cpp.proxy.empty_batch)."""
        cell = self.fast_cell()
        if quant_input.numel() != 0:
            return cell(quant_input, *args)
        with statistics_paused(self.cell):
            return cell(linked_to_parameters(quant_input, self.cell), *args)

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

    def gate_params_fwd(self, gate: GateParams, quant_input: Any) -> Tuple[Any, Any, Any]:
        quant_weight_ih = gate.input_weight()
        quant_weight_hh = gate.hidden_weight()
        self._check_bias_scale(gate, quant_input, quant_weight_ih)
        quant_bias = gate.bias_quant(gate.bias, quant_input, quant_weight_ih)
        return quant_weight_ih, quant_weight_hh, quant_bias

    def _check_bias_scale(self, gate: GateParams, quant_input: Any, quant_weight: Any) -> None:
        """Brevitas's forward-time error when a bias quantizer that takes its scale from the
        input (Int32Bias) gets an unquantized input or weight and has no cached scale: its
        phrase, "Input scale required", then what is missing in this layer's terms."""
        bias_quant = gate.bias_quant
        if (
            gate.bias is None
            or not bias_quant.is_quant_enabled
            or not getattr(bias_quant, "requires_input_scale", False)
            or bias_quant._cached_bias is not None
        ):
            return
        missing = []
        if not isinstance(quant_input, QuantTensor):
            missing.append(
                "the layer's input is unquantized ("
                + (
                    "the previous layer's output: io_quant=None"
                    if self.quantize_output_only
                    else "io_quant=None and a plain Tensor input"
                )
                + ")"
            )
        if not isinstance(quant_weight, QuantTensor):
            missing.append("the weight is unquantized (weight_quant=None)")
        if missing:
            raise RuntimeError(
                f"Input scale required: {self._layer_name}: "
                f"bias_quant={getattr(bias_quant.quant_injector, '__name__', '?')} takes its "
                f"scale from the input (input scale * weight scale), but {' and '.join(missing)}; "
                f"quantize both (io_quant=..., or a QuantTensor input to a one-layer stack, and "
                f"weight_quant=...), or use bias_quant=None or a bias quantizer with its own scale"
            )

    @staticmethod
    def _bias_value(quant_bias: Any, like: Tensor) -> Tensor:
        if quant_bias is None:
            return torch.tensor(0.0, device=like.device)
        return _unpack_quant_tensor(quant_bias)
