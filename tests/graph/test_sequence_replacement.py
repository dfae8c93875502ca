"""Quantizer replaces nn.RNN, nn.LSTM and nn.MultiheadAttention (issue 17's mapping).

Each replaced model is compared with the same model built by hand from brevitas_cpp.nn layers
(the keywords written out here, float weights loaded from the float modules), through training
steps and in eval: outputs bit for bit."""

import copy
import warnings

import pytest
import torch
from helpers import RecordedCalls
from torch import nn

from brevitas_cpp import config
from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer
from brevitas_cpp.quant import Int8WeightPerChannelFloat

pytestmark = pytest.mark.skipif(
    config.JIT_ENABLED, reason="replacement is eager model surgery; the layers script on their own"
)

LSTM_ACTS = ("io_", "gate_acc_", "sigmoid_", "tanh_", "cell_state_")


class Recurrent(nn.Module):
    """An LSTM called as nn.LSTM is (state as one (h, c) pair), then an RNN, then a Linear."""

    def __init__(self, batch_first: bool = False) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=batch_first)
        self.rnn = nn.RNN(12, 4, nonlinearity="relu", batch_first=batch_first)
        self.fc = nn.Linear(4, 3)

    def forward(self, x, state=None):
        y, (h, c) = self.lstm(x, state)
        y, _ = self.rnn(y)
        return self.fc(y) + h.sum() * 0 + c.sum() * 0


def _hand_built_recurrent(float_model: Recurrent, bw: int, ba: int) -> Recurrent:
    """The quantized model written out: what the replacement is expected to build."""
    model = copy.deepcopy(float_model)
    lstm = qnn.QuantLSTM(
        5,
        6,
        num_layers=2,
        bidirectional=True,
        batch_first=float_model.lstm.batch_first,
        weight_bit_width=bw,
        **{p + "bit_width": ba for p in LSTM_ACTS},
    )
    lstm.load_state_dict(float_model.lstm.state_dict())
    rnn = qnn.QuantRNN(
        12,
        4,
        nonlinearity="relu",
        batch_first=float_model.rnn.batch_first,
        weight_bit_width=bw,
        io_bit_width=ba,
        gate_acc_quant_bit_width=ba,
    )
    rnn.load_state_dict(float_model.rnn.state_dict())
    fc = qnn.QuantLinear(4, 3, weight_bit_width=bw)
    fc.weight, fc.bias = model.fc.weight, model.fc.bias
    model.lstm, model.rnn, model.fc = lstm, rnn, fc
    return model


def _train(model: nn.Module, x, steps: int = 3, **call):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    outs = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x, **call)
        out.square().mean().backward()
        opt.step()
        outs.append(out.detach())
    return outs


@pytest.mark.parametrize("batch_first", [False, True])
def test_recurrent_model_equals_hand_built(batch_first):
    torch.manual_seed(0)
    float_model = Recurrent(batch_first)
    want = _hand_built_recurrent(float_model, bw=4, ba=6)
    got = Quantizer(copy.deepcopy(float_model), bits_weights=4, bits_activations=6).prepare_model()
    assert type(got.lstm) is qnn.QuantLSTM and type(got.rnn) is qnn.QuantRNN
    x = torch.randn((2, 7, 5) if batch_first else (7, 2, 5))
    state = (torch.randn(4, 2, 6), torch.randn(4, 2, 6))  # nn.LSTM's (h0, c0) pair
    for a, b in zip(_train(got, x, state=state), _train(want, x, state=state)):
        assert torch.equal(a, b)
    got.eval(), want.eval()
    with torch.no_grad():
        assert torch.equal(got(x), want(x))


def test_recurrent_optimizer_gets_the_new_parameters():
    torch.manual_seed(1)
    model = Recurrent()
    stacked = model.lstm.weight_ih_l0.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prepared = Quantizer(model, optimizer=opt).prepare_model()
    held = {id(p) for group in opt.param_groups for p in group["params"]}
    assert all(id(p) in held for p in prepared.parameters())
    # The float LSTM's stacked weights (gates i, f, g, o) load exactly into the per-gate ones.
    layer = prepared.lstm.layers[0][0]
    for k, gate in enumerate(("input", "forget", "cell", "output")):
        weight = getattr(layer, f"{gate}_gate_params").input_weight.weight
        assert torch.equal(weight, stacked[6 * k : 6 * (k + 1)])


def test_recurrent_settings_reach_their_quantizers():
    """An override's prefixed keywords and the quantizer's weight defaults go to the layer, as
    when written by hand; a keyword no recurrent quantizer has is reported as unused."""
    torch.manual_seed(2)
    float_model = Recurrent()
    overrides = {"lstm": {"io_bit_width": 3, "act_quant": None}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = Quantizer(
            copy.deepcopy(float_model),
            overrides=overrides,
            weight_kwargs={"weight_quant": Int8WeightPerChannelFloat},
        ).prepare_model()
    assert any("'act_quant'" in str(w.message) for w in caught)
    want = qnn.QuantLSTM(
        5,
        6,
        num_layers=2,
        bidirectional=True,
        weight_quant=Int8WeightPerChannelFloat,
        weight_bit_width=8,
        **{p + "bit_width": 8 for p in LSTM_ACTS if p != "io_"},
        io_bit_width=3,
    )
    want.load_state_dict(float_model.lstm.state_dict())
    x = torch.randn(4, 2, 5)
    a, (ha, ca) = got.lstm(x)
    b, (hb, cb) = want(x)
    assert torch.equal(a, b) and torch.equal(ha, hb) and torch.equal(ca, cb)


def test_recurrent_options_and_optimizer_groups():
    """An override sets the layers' own options (gate_acc_quant of the RNN, the LSTM's
    cat_output_cell_states; CIFG, which has no place for the float forget gate, is refused);
    the new gate Parameters join the float module's optimizer group, the quantizers' learned
    scales quant_param_group's."""
    torch.manual_seed(8)
    model = Recurrent()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.01)
    overrides = {"rnn": {"gate_acc_quant": None}, "lstm": {"cat_output_cell_states": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no keyword reported unused
        prepared = Quantizer(
            model, overrides=overrides, optimizer=opt, quant_param_group={"weight_decay": 0.0}
        ).prepare_model()
    assert prepared.rnn.layers[0][0].cell.gate_acc_quant.fused_activation_quant_proxy is None
    assert prepared.lstm.cat_output_cell_states is False
    _, (_, cells) = prepared.lstm(torch.randn(4, 2, 5))
    assert isinstance(cells, list) and len(cells) == 4  # one per layer and direction
    groups = {id(p): g for g in opt.param_groups for p in g["params"]}
    gate = prepared.lstm.layers[0][0].input_gate_params.input_weight.weight
    assert groups[id(gate)]["weight_decay"] == 0.01
    scales = [p for n, p in prepared.lstm.named_parameters() if "tensor_quant" in n]
    assert scales and all(groups[id(p)]["weight_decay"] == 0.0 for p in scales)
    cifg = {"lstm": {"coupled_input_forget_gates": True}}
    with pytest.raises(ValueError, match="replacing lstm .*coupled_input_forget_gates"):
        Quantizer(Recurrent(), overrides=cifg).prepare_model()


def test_recurrent_float64_biases_load_exactly():
    torch.manual_seed(9)
    lstm = nn.LSTM(3, 4, dtype=torch.float64)
    quant = Quantizer(nn.ModuleDict({"lstm": lstm})).prepare_model().lstm
    bias = quant.layers[0][0].input_gate_params.bias
    assert bias.dtype == torch.float64
    assert torch.equal(bias, lstm.bias_ih_l0[:4] + lstm.bias_hh_l0[:4])


def test_unsupported_recurrent_options_are_refused_by_name():
    with pytest.raises(ValueError, match=r"replacing lstm \(LSTM\).*dropout=0.2"):
        Quantizer(nn.ModuleDict({"lstm": nn.LSTM(3, 4, num_layers=2, dropout=0.2)})).prepare_model()
    with pytest.raises(ValueError, match=r"proj_size=2"):
        Quantizer(nn.ModuleDict({"lstm": nn.LSTM(3, 4, proj_size=2)})).prepare_model()
    kept = nn.ModuleDict({"lstm": nn.LSTM(3, 4, proj_size=2)})
    Quantizer(kept, ignored_scopes=["lstm"]).prepare_model()
    assert type(kept.lstm) is nn.LSTM


def test_lstm_takes_back_its_quantized_states():
    """An IntQuantTensor is a NamedTuple: a quantized hx is one state, not an (h, c) pair."""
    torch.manual_seed(10)
    layer = qnn.QuantLSTM(3, 4, return_quant_tensor=True)
    x = torch.randn(5, 2, 3)
    first, (h, c) = layer(x)
    out, _ = layer(x, h, c)
    assert out.value.shape == first.value.shape


def test_lstm_state_pair_and_separate_states_agree():
    torch.manual_seed(3)
    layer = qnn.QuantLSTM(3, 4)
    x, h0, c0 = torch.randn(5, 2, 3), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    a = layer(x, (h0, c0))
    b = layer(x, h0, c0)
    assert torch.equal(a[0], b[0]) and all(torch.equal(u, v) for u, v in zip(a[1], b[1]))
    with pytest.raises(TypeError, match=r"either as hx and cx, or as one \(hx, cx\) pair"):
        layer(x, (h0, c0), c0)


def _encoder(batch_first: bool = True) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        8, 2, dim_feedforward=16, dropout=0.0, batch_first=batch_first
    )


def _hand_built_attention(float_mha: nn.MultiheadAttention, bw: int, ba: int) -> nn.Module:
    acts = ("in_proj_input_", "attn_output_weights_", "q_scaled_", "k_transposed_", "v_")
    mha = qnn.QuantMultiheadAttention(
        8,
        2,
        batch_first=float_mha.batch_first,
        packed_in_proj=False,
        in_proj_weight_bit_width=bw,
        out_proj_weight_bit_width=bw,
        out_proj_input_bit_width=ba,
        **{p + "bit_width": ba for p in acts},
    )
    mha.load_state_dict(float_mha.state_dict())
    return mha


@pytest.mark.parametrize("batch_first", [True, False])
def test_attention_in_an_encoder_layer_equals_hand_built(batch_first):
    """Only the attention is replaced (the linears kept in float): trained and in eval the
    encoder runs the quantized attention, never torch's fused kernel that would read its float
    weights."""
    torch.manual_seed(4)
    float_layer = _encoder(batch_first)
    want = copy.deepcopy(float_layer)
    want.self_attn = _hand_built_attention(float_layer.self_attn, bw=5, ba=7)
    want.activation_relu_or_gelu = 0
    got = Quantizer(
        copy.deepcopy(float_layer),
        bits_weights=5,
        bits_activations=7,
        ignored_scopes=["linear1", "linear2"],
    ).prepare_model()
    assert type(got.self_attn) is qnn.QuantMultiheadAttention
    assert type(got.linear1) is nn.Linear
    x = torch.randn((2, 5, 8) if batch_first else (5, 2, 8))
    mask = nn.Transformer.generate_square_subsequent_mask(5)

    def step(model):
        return model(x, src_mask=mask, is_causal=True)

    for _ in range(3):
        a, b = step(got), step(want)
        assert torch.equal(a, b)
        a.sum().backward(), b.sum().backward()
    got.eval(), want.eval()
    with torch.no_grad(), RecordedCalls() as calls:
        out = step(got)
    assert not any("_transformer_encoder_layer_fwd" in n for n in calls.names)
    with torch.no_grad():
        assert torch.equal(out, step(want))
        float_layer.eval()
        assert not torch.equal(out, step(float_layer))


def test_attention_parameters_and_optimizer_groups():
    """Separate q/k/v projections by default (copies of the packed float weight, put in the
    float module's optimizer group with its hyperparameters), out_proj's Parameters adopted;
    packed_in_proj=True in an override adopts the packed ones too."""
    torch.manual_seed(5)
    model = nn.ModuleDict({"mha": nn.MultiheadAttention(8, 2)})
    before = dict(model.mha.named_parameters())
    packed = before["in_proj_weight"].detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.01)
    quantizer = Quantizer(model, optimizer=opt, quant_param_group={"weight_decay": 0.0})
    mha = quantizer.prepare_model().mha
    assert mha.in_proj is None and mha.out_proj.weight is before["out_proj.weight"]
    for part, rows in zip((mha.q_proj, mha.k_proj, mha.v_proj), packed.chunk(3)):
        assert torch.equal(part.weight, rows)
    groups = {id(p): g for g in opt.param_groups for p in g["params"]}
    assert all(id(p) in groups for p in mha.parameters())
    assert groups[id(mha.q_proj.weight)]["weight_decay"] == 0.01
    scales = [p for n, p in mha.named_parameters() if "tensor_quant" in n]
    assert scales and all(groups[id(p)]["weight_decay"] == 0.0 for p in scales)
    model = nn.ModuleDict({"mha": nn.MultiheadAttention(8, 2)})
    before = dict(model.mha.named_parameters())
    mha = Quantizer(model, overrides={"mha": {"packed_in_proj": True}}).prepare_model().mha
    assert mha.in_proj.weight is before["in_proj_weight"]
    assert mha.in_proj.bias is before["in_proj_bias"] and mha.in_proj_bias is before["in_proj_bias"]
    cross = nn.ModuleDict({"mha": nn.MultiheadAttention(8, 2, kdim=6, vdim=5)})
    weight = cross.mha.v_proj_weight.detach().clone()
    prepared = Quantizer(cross).prepare_model()
    assert torch.equal(prepared.mha.v_proj.weight, weight)


def test_decoder_cross_attention_equals_hand_built():
    """A decoder layer's multihead_attn(x, memory, memory) runs (a packed in_proj would refuse
    it) and equals the hand-built layer."""
    torch.manual_seed(7)
    float_layer = nn.TransformerDecoderLayer(
        8, 2, dim_feedforward=16, dropout=0.0, batch_first=True
    )
    want = copy.deepcopy(float_layer)
    want.self_attn = _hand_built_attention(float_layer.self_attn, bw=8, ba=8)
    want.multihead_attn = _hand_built_attention(float_layer.multihead_attn, bw=8, ba=8)
    got = Quantizer(
        copy.deepcopy(float_layer), ignored_scopes=["linear1", "linear2"]
    ).prepare_model()
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    for _ in range(2):
        a, b = got(x, memory), want(x, memory)
        assert torch.equal(a, b)
        a.sum().backward(), b.sum().backward()


def test_attention_is_causal_is_a_hint_for_the_mask():
    torch.manual_seed(6)
    mha = qnn.QuantMultiheadAttention(8, 2)
    x = torch.randn(4, 2, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    a = mha(x, x, x, attn_mask=mask, is_causal=True)[0]
    b = mha(x, x, x, attn_mask=mask)[0]
    assert torch.equal(a, b)
    with pytest.raises(RuntimeError, match="is_causal=True needs attn_mask"):
        mha(x, x, x, is_causal=True)
