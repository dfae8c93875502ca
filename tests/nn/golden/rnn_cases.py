"""The recurrent-layer cases of brevitas_0_12_rnn.pt, defined once for both libraries.

record_rnn.py builds them from brevitas.nn/brevitas.quant (in the Brevitas venv) and
tests/nn/test_quant_rnn.py from brevitas_cpp.nn/brevitas_cpp.quant, under the same names. A
keyword value "quant:<Name>" is the quantizer <Name> of the library the case is built from.
Every case is small (input 3, hidden 4, 5 steps, batch 2) so the recording stays a few hundred
kilobytes and the replay fast.
"""

from typing import Any, Dict

import torch

INPUT_SIZE = 3
HIDDEN_SIZE = 4
SEQ_LEN = 5
BATCH = 2
STEPS = 3  # training steps recorded per case
LR = 0.05  # SGD on the layers' weights and biases
QUANT_LR = 0.002  # SGD on the quantizers' learned scales (they stay positive)


def lr_of(param_name: str) -> float:
    return QUANT_LR if "tensor_quant" in param_name else LR


# name -> (layer class name, keywords, whether initial states are passed)
CASES: Dict[str, Dict[str, Any]] = {
    "rnn_default": {"cls": "QuantRNN", "kwargs": {}, "with_state": False},
    "rnn_deep_bidir": {
        "cls": "QuantRNN",
        "kwargs": {
            "num_layers": 2,
            "bidirectional": True,
            "batch_first": True,
            "nonlinearity": "relu",
            "weight_bit_width": 4,
            # A short warm-up: the shared io quantizer turns into a learned scale in the middle
            # of a forward of the second step. (Not the gate accumulators': a ReLU RNN's
            # accumulator percentile can be negative, which brevitas_cpp's quantizer refuses as
            # a scale where Brevitas carries on.)
            "io_collect_stats_steps": 17,
        },
        "with_state": True,
    },
    "rnn_shared_qt": {
        "cls": "QuantRNN",
        "kwargs": {
            "bidirectional": True,
            "shared_input_hidden_weights": True,
            "return_quant_tensor": True,
            "weight_quant": "quant:Int8WeightPerChannelFloat",
        },
        "with_state": False,
    },
    "rnn_unquantized_io": {
        "cls": "QuantRNN",
        "kwargs": {"io_quant": None, "bias_quant": None, "gate_acc_quant": None, "bias": False},
        "with_state": True,
    },
    "lstm_default": {"cls": "QuantLSTM", "kwargs": {}, "with_state": False},
    "lstm_deep_bidir": {
        "cls": "QuantLSTM",
        "kwargs": {
            "num_layers": 2,
            "bidirectional": True,
            "batch_first": True,
            "cat_output_cell_states": False,
            "shared_cell_state_quant": False,
            "sigmoid_bit_width": 6,
            "io_collect_stats_steps": 25,
            "cell_state_collect_stats_steps": 12,
        },
        "with_state": True,
    },
    "lstm_cifg_shared": {
        "cls": "QuantLSTM",
        "kwargs": {
            "coupled_input_forget_gates": True,
            "shared_intra_layer_weight_quant": True,
            "shared_intra_layer_gate_acc_quant": True,
            "bidirectional": True,
            "shared_input_hidden_weights": True,
            "return_quant_tensor": True,
        },
        "with_state": True,
    },
    "lstm_float_internals": {
        "cls": "QuantLSTM",
        "kwargs": {
            "sigmoid_quant": None,
            "tanh_quant": None,
            "gate_acc_quant": None,
            "bias_quant": None,
            "num_layers": 2,
        },
        # Brevitas reads hx[2 * l + d], which for stacked unidirectional layers is out of range.
        "with_state": False,
    },
}


def resolve(lib_quant: Any, value: Any) -> Any:
    if isinstance(value, str) and value.startswith("quant:"):
        return getattr(lib_quant, value[len("quant:") :])
    return value


def build(lib_nn: Any, lib_quant: Any, name: str) -> torch.nn.Module:
    case = CASES[name]
    kwargs = {k: resolve(lib_quant, v) for k, v in case["kwargs"].items()}
    return getattr(lib_nn, case["cls"])(INPUT_SIZE, HIDDEN_SIZE, **kwargs)


def float_twin(name: str) -> torch.nn.Module:
    """The plain-torch layer whose state_dict is the case's float checkpoint."""
    case = CASES[name]
    kw = case["kwargs"]
    common = {
        "num_layers": kw.get("num_layers", 1),
        "bias": kw.get("bias", True),
        "batch_first": kw.get("batch_first", False),
        "bidirectional": kw.get("bidirectional", False),
    }
    if case["cls"] == "QuantRNN":
        return torch.nn.RNN(
            INPUT_SIZE, HIDDEN_SIZE, nonlinearity=kw.get("nonlinearity", "tanh"), **common
        )
    return torch.nn.LSTM(INPUT_SIZE, HIDDEN_SIZE, **common)


def input_shape(name: str) -> tuple:
    if CASES[name]["kwargs"].get("batch_first", False):
        return (BATCH, SEQ_LEN, INPUT_SIZE)
    return (SEQ_LEN, BATCH, INPUT_SIZE)


def state_shape(name: str) -> tuple:
    kw = CASES[name]["kwargs"]
    directions = 2 if kw.get("bidirectional", False) else 1
    return (kw.get("num_layers", 1) * directions, BATCH, HIDDEN_SIZE)
