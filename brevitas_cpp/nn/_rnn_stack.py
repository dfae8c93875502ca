"""What QuantRNN and QuantLSTM share as stacks of layers: ``layers[l][d]`` built with the
first forward layer's shared quantizers serving every later one, the input and state checks,
and the loading of a float nn.RNN / nn.LSTM checkpoint under the layer's own prefix."""

import re
from functools import partial
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp.proxy.materialize import apply_keeping_ties, reset_quantizers
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor

from ._rnn_args import _check_bool, _check_size, _layer_arguments, _split_kwargs

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
        io_quant: Any,
        shared_input_hidden_weights: bool,
        dtype: Optional[torch.dtype],
        device: Any,
        return_quant_tensor: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        name = self._layer_name
        # As in Brevitas, kwargs holds the layer's own arguments (batch_first, bias,
        # weight_quant, ...: those layer_impl names) and the prefixed quantizer keywords.
        layer_kwargs, kwargs = _layer_arguments(layer_impl, kwargs)
        batch_first = layer_kwargs.get("batch_first", False)
        _check_size(name, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        _check_bool(
            name,
            batch_first=batch_first,
            shared_input_hidden_weights=shared_input_hidden_weights,
            return_quant_tensor=return_quant_tensor,
        )
        # Read by its truth value, as nn.RNN and Brevitas do (Brevitas's own tests pass the
        # string "shared_input_hidden_weights" for a bidirectional layer).
        bidirectional = bool(bidirectional)
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
        # A bias quantizer that takes its scale from the input (Int32Bias) with io_quant=None
        # is refused when it runs, as in Brevitas: a QuantTensor input gives it that scale.

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

    def _apply(self, fn, recurse=True):
        # A quantizer reads the layer's weight as a parameter of its own (the same object):
        # moving to or from 'meta' must leave it so (brevitas_cpp.proxy.materialize).
        return apply_keeping_ties(self, partial(super()._apply, fn, recurse))

    def reset_parameters(self) -> None:
        """Every layer's gate weights and biases drawn again, as nn.RNN / nn.LSTM's
        reset_parameters, then every quantizer rebuilt (brevitas_cpp.proxy.materialize): what
        gives a layer built on the meta device its values after to_empty(), besides
        load_state_dict()."""
        for directions in self.layers:
            for layer in directions:
                layer.reset_parameters()
        reset_quantizers(self)

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
    # bias_ih + bias_hh, summed into zeros of the default dtype as Brevitas does (float32 sums
    # stay Brevitas's), or of the biases' own when wider (float64 loses nothing), on their device.
    if key not in state_dict:
        dtype = torch.promote_types(torch.get_default_dtype(), value.dtype)
        state_dict[key] = torch.zeros(hidden_size, dtype=dtype, device=value.device)
    state_dict[key].add_(value)


def _cat_if_many(parts: List[Any], dim: int) -> Any:
    """torch.cat of the per-direction or per-layer results, or the one result itself (a lone
    QuantTensor keeps its metadata without going through the cat handler)."""
    return torch.cat(parts, dim=dim) if len(parts) > 1 else parts[0]
