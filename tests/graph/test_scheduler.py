"""The compression scheduler and the controller: callbacks at the epochs the policies name, the
policies' effects checked against the float model and the parameters' flags, state round
trips, and config errors."""

import warnings

import pytest
import torch
from torch import nn

from brevitas_cpp.graph import (
    BitWidthRamp,
    CompressionScheduler,
    FreezeBatchNorm,
    FreezeBitWidths,
    FreezeScales,
    Policy,
    QuantizationController,
    QuantizationDelay,
    Quantizer,
)
from brevitas_cpp.quant import Int8WeightPerTensorFloat


class Recording(Policy):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []

    def on_epoch_begin(self, model, epoch):
        self.calls.append(("epoch_begin", epoch))

    def before_backward_pass(self, model, epoch, minibatch, loss):
        self.calls.append(("before_backward", epoch, minibatch))
        return torch.tensor(1.0)

    def on_minibatch_end(self, model, epoch, minibatch):
        self.calls.append(("minibatch_end", epoch, minibatch))

    def on_epoch_end(self, model, epoch):
        self.calls.append(("epoch_end", epoch))


def _loop(scheduler, epochs, minibatches=2):
    losses = []
    for epoch in range(epochs):
        scheduler.on_epoch_begin(epoch)
        for minibatch in range(minibatches):
            scheduler.on_minibatch_begin(epoch, minibatch)
            losses.append(scheduler.before_backward_pass(epoch, minibatch, torch.tensor(0.0)))
            scheduler.on_minibatch_end(epoch, minibatch)
        scheduler.on_epoch_end(epoch)
    return losses


def test_policies_run_at_their_epochs():
    policy = Recording(starting_epoch=1, ending_epoch=6, frequency=2)
    losses = _loop(CompressionScheduler(nn.Linear(2, 2), [policy]), epochs=7, minibatches=1)
    assert [c[1] for c in policy.calls if c[0] == "epoch_end"] == [1, 3, 5]
    assert [c[1] for c in policy.calls if c[0] == "before_backward"] == [1, 3, 5]
    # Every epoch begin is seen (delays and freezes hold their state by epoch).
    assert [c[1] for c in policy.calls if c[0] == "epoch_begin"] == list(range(7))
    assert [float(x) for x in losses] == [0, 1, 0, 1, 0, 1, 0]


def _prepared():
    torch.manual_seed(0)
    float_model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(float_model.state_dict())
    Quantizer(model, bits_weights=3, bits_activations=3).prepare_model()
    return float_model, model


def test_quantization_delay_runs_the_float_model_before_its_epoch():
    float_model, model = _prepared()
    scheduler = CompressionScheduler(model, [QuantizationDelay(starting_epoch=2)])
    x = torch.randn(6, 4)
    model.eval(), float_model.eval()
    for epoch, is_float in ((0, True), (1, True), (2, False), (3, False)):
        scheduler.on_epoch_begin(epoch)
        assert torch.equal(model(x), float_model(x)) == is_float


def test_freeze_batch_norm_keeps_its_statistics_from_its_epoch():
    _, model = _prepared()
    scheduler = CompressionScheduler(model, [FreezeBatchNorm(starting_epoch=1)])
    bn = model[1]
    for epoch in range(3):
        scheduler.on_epoch_begin(epoch)
        model.train()  # as a training loop does
        scheduler.on_minibatch_begin(epoch, 0)
        before = bn.running_mean.clone()
        model(torch.randn(6, 4) + 3.0)
        assert torch.equal(bn.running_mean, before) == (epoch >= 1)


class LearnedBits(Int8WeightPerTensorFloat):
    bit_width_impl_type = "parameter"


def test_freeze_scales_and_bit_widths():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    Quantizer(model, weight_kwargs={"weight_quant": LearnedBits}).prepare_model()
    scale = model[1].act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value
    bits = model[0].weight_quant.tensor_quant.msb_clamp_bit_width_impl.bit_width_offset
    scheduler = CompressionScheduler(
        model, [FreezeScales(starting_epoch=1), FreezeBitWidths(starting_epoch=2)]
    )
    flags = []
    for epoch in range(3):
        scheduler.on_epoch_begin(epoch)
        flags.append((scale.requires_grad, bits.requires_grad))
    assert flags == [(True, True), (False, True), (False, False)]
    assert model[0].weight.requires_grad


def test_scheduler_state_round_trip_resumes_the_policies():
    float_model, model = _prepared()
    scheduler = CompressionScheduler(model, [QuantizationDelay(starting_epoch=2)])
    scheduler.on_epoch_begin(3)
    state = scheduler.state_dict()
    assert state == {
        "epoch": 3,
        "policies": [
            {
                "policy": "QuantizationDelay",
                "starting_epoch": 2,
                "ending_epoch": None,
                "frequency": 1,
            }
        ],
    }
    _, resumed = _prepared()
    for proxy in resumed.modules():
        if hasattr(proxy, "disable_quant"):
            proxy.disable_quant = True  # as a fresh run's epoch 0 would leave it
    restored = CompressionScheduler(resumed, [QuantizationDelay(starting_epoch=2)])
    restored.load_state_dict(state)
    x = torch.randn(3, 4)
    resumed.eval(), float_model.eval()
    assert not torch.equal(resumed(x), float_model(x))  # quantized again at epoch 3
    other = CompressionScheduler(resumed, [QuantizationDelay(starting_epoch=5)])
    with pytest.raises(ValueError, match="the checkpoint's policies"):
        other.load_state_dict(state)


@pytest.mark.parametrize(
    "entry, match",
    [
        ({"policy": "Prune"}, "unknown policy 'Prune'; accepted: QuantizationDelay"),
        ({"policy": "FreezeScales", "start": 1}, r"policies\[0\] \(FreezeScales\).*accepted keys"),
        ({"policy": "FreezeScales", "starting_epoch": -1}, "starting_epoch must be a non-negative"),
        ({"policy": "FreezeScales", "frequency": 0}, "frequency must be at least 1"),
        (
            {"policy": "FreezeScales", "starting_epoch": 3, "ending_epoch": 2},
            "ending_epoch must be",
        ),
    ],
)
def test_bad_policies(entry, match):
    with pytest.raises(ValueError, match=match):
        CompressionScheduler.from_config(nn.Linear(2, 2), [entry])


def test_controller_statistics_loss_and_state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    quantizer = Quantizer(
        model,
        bits_weights=4,
        overrides={"2": {"weight_quant": LearnedBits, "weight_bit_width": 6}},
        policies=[{"policy": "FreezeBitWidths", "starting_epoch": 1}],
    )
    quantizer.prepare_model()
    controller = quantizer.controller()
    # (4 bits * 16 weights + 6 bits * 8 weights) / 24 weights
    loss = controller.loss()
    assert loss.item() == pytest.approx((4 * 16 + 6 * 8) / 24)
    loss.backward()
    offset = model[2].weight_quant.tensor_quant.msb_clamp_bit_width_impl.bit_width_offset
    assert offset.grad is not None  # learned bit widths get the loss's gradient
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = controller.statistics()
    assert stats["quant_layers"] == 3 and stats["fraction_quantized"] == 1.0
    bit_widths = {q["name"]: q["bit_width"] for q in stats["quantizers"] if "bit_width" in q}
    assert bit_widths["0.weight_quant"] == [4.0] and bit_widths["2.weight_quant"] == [6.0]
    controller.scheduler.on_epoch_begin(1)
    state = controller.state_dict()
    fresh = QuantizationController(model, quantizer.controller().scheduler)
    fresh.load_state_dict(state)
    assert fresh.scheduler.epoch == 1 and not offset.requires_grad


def test_controller_before_prepare_is_refused():
    with pytest.raises(RuntimeError, match="prepare_model"):
        Quantizer(nn.Linear(2, 2)).controller()


class StatefulBits(Int8WeightPerTensorFloat):
    bit_width_impl_type = "stateful_const"


def test_bit_width_ramp_of_the_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Quantizer(model, bits_weights=8, weight_kwargs={"weight_quant": StatefulBits}).prepare_model()
    scheduler = CompressionScheduler.from_config(
        model,
        [
            {
                "policy": "BitWidthRamp",
                "starting_epoch": 1,
                "ending_epoch": 5,
                "start_bits": 8,
                "end_bits": 4,
            }
        ],
    )
    # round(8 + (4 - 8) * (epoch - 1) / 3), held at 8 before and 4 after the ramp.
    expected = [8, 8, round(8 - 4 / 3), round(8 - 8 / 3), 4, 4]
    seen = []
    for epoch in range(6):
        scheduler.on_epoch_begin(epoch)
        quant = model[0].quant_weight()
        seen.append(int(quant.bit_width.item()))
        levels = torch.unique(torch.round(quant.value / quant.scale))
        assert levels.numel() <= 2 ** seen[-1]
        model(torch.randn(3, 6)).sum().backward()
        optimizer.step()
    assert seen == expected
    assert model[2].quant_weight().bit_width.item() == 4
    assert scheduler.state_dict()["policies"][0]["end_bits"] == 4


def test_bit_width_ramp_needs_stateful_bit_widths():
    model = nn.Sequential(nn.Linear(2, 2))
    Quantizer(model).prepare_model()
    scheduler = CompressionScheduler(model, [BitWidthRamp(0, 3, 8, 4)])
    with pytest.raises(RuntimeError, match="bit_width_impl_type='stateful_const'"):
        scheduler.on_epoch_begin(0)
    with pytest.raises(ValueError, match="target must be 'weights' or 'activations'"):
        BitWidthRamp(0, 3, 8, 4, target="bias")
    with pytest.raises(ValueError, match="start_bits must be an integer"):
        BitWidthRamp(0, 3, 0, 4)
