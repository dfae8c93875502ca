"""Smoke test of examples/char_lstm.py (QuantLSTM language model): a few steps, then the held-out
bits per character it reports, recomputed here for the float model, and the 8-bit model with the
float weights close to the float one."""

import importlib.util
import math
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "char_lstm.py"


@pytest.fixture(scope="module")
def char_lstm():
    spec = importlib.util.spec_from_file_location("char_lstm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["char_lstm"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("char_lstm", None)


def test_quantized_lstm_trains_near_the_float_one(char_lstm):
    result = char_lstm.main(["--float-steps", "40", "--qat-steps", "2", "--stats-steps", "2"])
    assert all(math.isfinite(v) for v in result.values())
    # log2(vocabulary) bits is a uniform guess; 40 steps already beat it.
    _, _, vocab = char_lstm.load_text()
    assert result["float"] < math.log2(vocab)
    # 8-bit weights, activations and gates on the float weights lose little.
    assert abs(result["quant_before"] - result["float"]) < 0.5
