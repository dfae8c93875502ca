"""An error raised in a quant layer's forward names the layer: its module path in the model, as
``named_modules()`` names it, and its class, ahead of the original message, in an error of the
same type (brevitas_cpp.nn._error_context). Failures are provoked for real: a negative learned
scale after the statistics phase, a NaN weight, inputs of the wrong shape or kind."""

import re
from typing import Any, List

import pytest
import torch
from torch import Tensor, nn

import brevitas_cpp.nn as qnn
from brevitas_cpp.nn.mixin.base import QuantLayerConfigError
from brevitas_cpp.quant_tensor import IntQuantTensor
from brevitas_cpp.utils.torch_utils import StopFwdException

# The op's words (which op quantizes is the quantizer's business: any brevitas_cpp op).
SCALE_ERROR = re.compile(r"brevitas_cpp::\w+: (the )?scale .*must be a normal positive finite")


class Block(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = qnn.QuantConv2d(channels, channels, 3, padding=1)
        self.act = qnn.QuantReLU(collect_stats_steps=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.conv(x))


class Head(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.pool = qnn.TruncAvgPool2d(4, trunc_quant=None, return_quant_tensor=False)
        self.fc = qnn.QuantLinear(channels, 3, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.pool(x).flatten(1))


class Net(nn.Module):
    def __init__(self, channels: int = 4) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity()
        self.body = nn.Sequential(Block(channels), Block(channels))
        self.merge = qnn.QuantCat()
        self.add = qnn.QuantEltwiseAdd()
        self.head = Head(2 * channels)

    def forward(self, x: Tensor) -> Tensor:
        y = self.body(self.inp(x))
        return self.head(self.merge([y, self.add(y, y)]))


def _net() -> Net:
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 4, 4, 4)
    net(x)
    net(x)  # past collect_stats_steps: the ReLUs' learned scales are in use
    return net


def _negative_scale(act: nn.Module) -> None:
    with torch.no_grad():
        for p in act.parameters():
            p.fill_(-1.0)


def _raised(call: Any, error_type: type) -> BaseException:
    with pytest.raises(error_type) as info:
        call()
    assert type(info.value) is error_type
    return info.value


def test_op_error_names_the_layer_path_and_class_and_keeps_type_and_message() -> None:
    net = _net()
    _negative_scale(net.body[1].act)
    error = _raised(lambda: net(torch.randn(2, 4, 4, 4)), RuntimeError)
    message = str(error)
    # (with BREVITAS_JIT=1 the op's message follows the TorchScript interpreter's words)
    assert message.startswith("body.1.act (QuantReLU): ")
    assert SCALE_ERROR.search(message)
    # Chained from the original, whose message is the op's alone.
    assert type(error.__cause__) is RuntimeError
    assert "body.1.act" not in str(error.__cause__)
    assert message == "body.1.act (QuantReLU): " + str(error.__cause__)
    # pytest.raises(..., match=) on the op's words still matches.
    with pytest.raises(RuntimeError, match="must be a normal positive finite number"):
        net(torch.randn(2, 4, 4, 4))


def test_weight_input_and_float_op_errors_name_the_weight_layer() -> None:
    net = _net()
    with torch.no_grad():
        net.body[0].conv.weight[0, 0, 0, 0] = float("nan")
    error = _raised(lambda: net(torch.randn(2, 4, 4, 4)), RuntimeError)
    assert str(error).startswith("body.0.conv (QuantConv2d): ")
    assert SCALE_ERROR.search(str(error))
    # The float op's own error (wrong number of input channels), in the head's linear layer.
    net = _net()
    net.head.fc = qnn.QuantLinear(5, 3, bias=True)
    error = _raised(lambda: net(torch.randn(2, 4, 4, 4)), RuntimeError)
    assert str(error).startswith("head.fc (QuantLinear): ")
    assert "mat1 and mat2 shapes cannot be multiplied" in str(error)


def test_library_error_class_is_kept() -> None:
    net = _net()
    net.head.pool.return_quant_tensor = True  # with a float input: nothing quantized to return
    error = _raised(lambda: net(torch.randn(2, 4, 4, 4)), QuantLayerConfigError)
    assert isinstance(error, RuntimeError) and isinstance(error, AssertionError)
    assert str(error).startswith(
        "head.pool (TruncAvgPool2d): QuantLayer is not correctly configured"
    )


def test_eltwise_and_cat_errors_name_the_layer() -> None:
    net = _net()
    error = _raised(lambda: net.merge.forward(torch.randn(2)), ValueError)  # called directly
    # The message already names the class: a layer called directly leaves it as it is.
    assert str(error).startswith("QuantCat: tensor_list must be a non-empty list")

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.merge = qnn.QuantCat()
            self.add = qnn.QuantEltwiseAdd()

        def forward(self, x: Tensor, other: Tensor) -> Tensor:
            return self.merge([self.add(x, other)], dim=5)

    wrapper = Wrapper()
    error = _raised(lambda: wrapper(torch.randn(2, 3), torch.randn(2, 4)), RuntimeError)
    assert str(error).startswith("add (QuantEltwiseAdd): ")
    assert "must match the size of tensor b" in str(error)
    error = _raised(lambda: wrapper(torch.randn(2, 3), torch.randn(2, 3)), IndexError)
    # IndexError is not rebuilt: the same error, the layer in a note.
    assert "Dimension out of range" in str(error) and "merge" not in str(error)
    assert error.__notes__ == ["raised in quant layer merge (QuantCat)"]


def test_nested_quant_layers_add_one_path() -> None:
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = qnn.QuantMultiheadAttention(8, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.attn(x, x, x)[0]

    torch.manual_seed(0)
    model = nn.Sequential(nn.Identity(), Encoder())
    x = torch.randn(3, 2, 8)
    model(x)
    with torch.no_grad():
        model[1].attn.in_proj.weight[0, 0] = float("nan")
    error = _raised(lambda: model(x), RuntimeError)
    message = str(error)
    assert message.startswith("1.attn.in_proj (QuantLinear): ")
    assert SCALE_ERROR.search(message)
    assert message.count("(Quant") == 1 and "QuantMultiheadAttention" not in message
    assert not getattr(error, "__notes__", None)
    # The attention's own error names the attention.
    error = _raised(lambda: Encoder()(torch.randn(3, 2, 6)), ValueError)
    assert str(error).startswith(
        "attn (QuantMultiheadAttention): QuantMultiheadAttention: query has 6 features"
    )


def test_layer_called_directly_names_its_class_only() -> None:
    torch.manual_seed(0)
    act = qnn.QuantReLU(collect_stats_steps=1)
    x = torch.randn(4, 8)
    act(x)
    act(x)
    _negative_scale(act)
    error = _raised(lambda: act(x), RuntimeError)
    assert str(error).startswith("QuantReLU: ")
    assert SCALE_ERROR.search(str(error))
    # A layer shared by two models is named by the model being run.
    first, second = nn.Sequential(act), nn.Sequential(nn.Identity(), nn.Sequential(act))
    assert str(_raised(lambda: first(x), RuntimeError)).startswith("0 (QuantReLU): ")
    assert str(_raised(lambda: second(x), RuntimeError)).startswith("1.0 (QuantReLU): ")


class _Raise:
    """A quantize that raises what it is given (errors no real failure raises)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def __call__(self, *args: Any) -> List[Tensor]:
        raise self.error


def test_control_flow_and_base_exceptions_pass_untouched() -> None:
    net = _net()
    x = torch.randn(2, 4, 4, 4)
    for error in (StopFwdException(), StopIteration(), KeyboardInterrupt()):
        net.body[0].act.act_quant.quantize = _Raise(error)
        with pytest.raises(type(error)) as info:
            net(x)
        assert info.value is error and not getattr(error, "__notes__", None)


def test_error_of_other_type_is_the_same_object_with_a_note() -> None:
    class OddError(Exception):
        def __init__(self, code: int, text: str) -> None:
            super().__init__(code, text)

    net = _net()
    odd = OddError(7, "odd")
    net.body[1].conv.weight_quant.quantize = _Raise(odd)
    with pytest.raises(OddError) as info:
        net(torch.randn(2, 4, 4, 4))
    assert info.value is odd
    assert odd.__notes__ == ["raised in quant layer body.1.conv (QuantConv2d)"]


def test_scripted_model_still_scripts() -> None:
    """TorchScript compiles no try statement: the scripted forward calls the body directly."""
    torch.manual_seed(0)
    model = nn.Sequential(
        qnn.QuantIdentity(), qnn.QuantLinear(8, 4, bias=True), qnn.QuantReLU()
    ).eval()
    x = torch.randn(2, 8)
    assert torch.equal(torch.jit.script(model)(x), model(x))


def test_embedding_error_names_the_layer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Identity(), nn.Sequential(qnn.QuantEmbedding(5, 3)))
    with torch.no_grad():
        model[1][0].weight[0, 0] = float("nan")
    error = _raised(lambda: model(torch.tensor([[0, 1]])), RuntimeError)
    assert str(error).startswith("1.0 (QuantEmbedding): ")
    assert SCALE_ERROR.search(str(error))
    # The lookup's own error (an index past the table): IndexError, the layer in a note.
    model = nn.Sequential(qnn.QuantEmbedding(5, 3))
    error = _raised(lambda: model(torch.tensor([[7]])), IndexError)
    assert error.__notes__ == ["raised in quant layer 0 (QuantEmbedding)"]


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: qnn.QuantUpsample(scale_factor=2, mode="bilinear"), "QuantUpsample"),
        (lambda: qnn.QuantUpsamplingBilinear2d(scale_factor=2), "QuantUpsamplingBilinear2d"),
    ],
)
def test_upsample_error_names_the_layer(make: Any, name: str) -> None:
    model = nn.Sequential(nn.Identity(), nn.Sequential(nn.Identity(), make()))
    # A plain input where the interpolation is rounded to the input's scale.
    error = _raised(lambda: model(torch.randn(1, 1, 2, 2)), TypeError)
    assert str(error).startswith(f"1.1 ({name}): {name}: mode='bilinear' interpolates")


def test_nearest_upsample_error_names_the_layer() -> None:
    model = nn.Sequential(qnn.QuantUpsamplingNearest2d(scale_factor=2))
    error = _raised(lambda: model(torch.randn(1, 1, 2, 2)), QuantLayerConfigError)
    assert str(error).startswith("0 (QuantUpsamplingNearest2d): QuantLayer is not correctly")
    model[0].return_quant_tensor = False
    # torch's own error (a 1-D input), of a type that is not rebuilt: the layer in a note.
    error = _raised(lambda: model(torch.randn(2)), NotImplementedError)
    assert error.__notes__ == ["raised in quant layer 0 (QuantUpsamplingNearest2d)"]


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = qnn.QuantScaledDotProductAttention()
        self.sdpa = qnn.ScaledDotProductAttention()

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Any = None, mask2: Any = None
    ) -> Tensor:
        return self.sdpa(self.attn(q, k, v, attn_mask=mask), k, v, mask2)


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = _Attention()

    def forward(self, *args: Any) -> Tensor:
        return self.enc(*args)


def test_sdpa_errors_name_the_layer() -> None:
    torch.manual_seed(0)
    model = _Encoder()
    q = torch.randn(1, 2, 3, 4)
    # Its own check of its arguments (given by keyword), the layer called directly.
    attn = model.enc.attn
    error = _raised(lambda: attn(q, q, q, attn_mask=q[0, 0] > 0, is_causal=True), ValueError)
    assert str(error).startswith(
        "QuantScaledDotProductAttention: give either attn_mask or is_causal=True"
    )
    # A mask of the wrong shape: torch's error, named.
    error = _raised(lambda: model(q, q, q, torch.zeros(3, 5)), RuntimeError)
    assert str(error).startswith("enc.attn (QuantScaledDotProductAttention): ")
    # A quantizer inside it names itself (the innermost quant layer).
    bad = q.clone()
    bad[0, 0, 0, 0] = float("nan")
    error = _raised(lambda: model(bad, q, q), RuntimeError)
    assert str(error).startswith("enc.attn.q_scaled_quant (QuantIdentity): ")
    assert SCALE_ERROR.search(str(error))
    assert "QuantScaledDotProductAttention" not in str(error)
    # The float module too.
    error = _raised(lambda: model.enc.sdpa(q, torch.randn(1, 2, 3, 5), q), RuntimeError)
    assert str(error).startswith("ScaledDotProductAttention: ")
    error = _raised(lambda: model(q, q, q, None, torch.zeros(3, 5)), RuntimeError)
    assert str(error).startswith("enc.sdpa (ScaledDotProductAttention): ")


def test_sdpa_keyword_arguments_are_passed_through() -> None:
    torch.manual_seed(0)
    attn = qnn.QuantScaledDotProductAttention().eval()
    q, k, v = torch.randn(3, 1, 2, 3, 4).unbind(0)
    mask = torch.randn(3, 3)
    expected = attn(q, k, v, mask, 0.0, False, 0.5, False)
    assert torch.equal(
        attn(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False, scale=0.5), expected
    )
    assert torch.equal(attn(query=q, key=k, value=v, attn_mask=mask, scale=0.5), expected)


@pytest.mark.parametrize("cls", [qnn.QuantRNN, qnn.QuantLSTM])
def test_recurrent_stack_error_names_the_stack(cls: Any) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Identity(), nn.Sequential(cls(3, 4)))
    x = torch.randn(2, 1, 3)
    model(x)
    error = _raised(lambda: model(torch.randn(2, 3)), ValueError)
    assert str(error).startswith(f"1.0 ({cls.__name__}): {cls.__name__}: input must have shape")
    # A NaN weight: its quantizer fails inside the stack.
    stack = model[1][0]
    for name, p in stack.layers[0][0].named_parameters():
        if name.endswith("input_weight.weight"):
            with torch.no_grad():
                p[0, 0] = float("nan")
    error = _raised(lambda: model(x), RuntimeError)
    assert str(error).startswith(f"1.0 ({cls.__name__}): ")
    assert SCALE_ERROR.search(str(error))
    # The initial state given by keyword (as nn.LSTM takes it too) still reaches the stack.
    state = torch.zeros(1, 1, 4)

    def fresh() -> nn.Module:
        torch.manual_seed(0)
        return cls(3, 4)

    if cls is qnn.QuantRNN:
        torch.testing.assert_close(fresh()(x, hx=state), fresh()(x, state))
    else:
        expected = fresh()(x, state, state)
        torch.testing.assert_close(fresh()(x, hx=state, cx=state), expected)
        torch.testing.assert_close(fresh()(x, hx=(state, state)), expected)
        error = _raised(lambda: stack(x, hx=(state, state), cx=state), TypeError)
        assert str(error).startswith("QuantLSTM: the initial state is given either")


def test_hadamard_classifier_error_names_the_layer() -> None:
    model = nn.Sequential(nn.Identity(), qnn.HadamardClassifier(5, 3, return_quant_tensor=True))
    x = IntQuantTensor(torch.ones(1, 5), 1.0, 1.0, 8.0, False, False)  # zero point 1
    error = _raised(lambda: model(x), RuntimeError)
    assert str(error) == (
        "1 (HadamardClassifier): Computing zero point of output accumulator not supported yet."
    )
    # The scripted layer still runs its body directly.
    layer = qnn.HadamardClassifier(5, 3)
    x = torch.randn(2, 5)
    assert torch.equal(torch.jit.script(layer)(x), layer(x))
