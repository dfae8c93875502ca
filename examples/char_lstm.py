"""Character-level language model with a quantized LSTM: next-character prediction on the text
of this repository's README (shipped with it, no download).

1. Train a float model (embedding, nn.LSTM, linear) for --float-steps steps.
2. Load its weights into the same model with brevitas_cpp.nn.QuantLSTM and quantized
   embedding/linear layers (8-bit weights, 8-bit activations and gates by default), and fine-tune
   it with QAT for --qat-steps steps.
3. Print the held-out loss in bits per character: float, quantized before QAT, after QAT.

    python examples/char_lstm.py              # about a minute on 2 cores
    python examples/char_lstm.py --bits 4     # 4-bit weights and activations
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

import brevitas_cpp.nn as qnn

TEXT = Path(__file__).resolve().parents[1] / "README.md"
SEQ, BATCH, HIDDEN, EMBED = 48, 32, 96, 24


def load_text() -> Tuple[Tensor, Tensor, int]:
    """The README as character ids: the first 90% for training, the rest held out."""
    text = TEXT.read_text(encoding="utf-8")
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text], dtype=torch.long)
    split = int(0.9 * len(ids))
    return ids[:split], ids[split:], len(vocab)


def batch(ids: Tensor, generator: torch.Generator) -> Tuple[Tensor, Tensor]:
    starts = torch.randint(0, len(ids) - SEQ - 1, (BATCH,), generator=generator)
    x = torch.stack([ids[s : s + SEQ] for s in starts.tolist()])
    y = torch.stack([ids[s + 1 : s + SEQ + 1] for s in starts.tolist()])
    return x, y


class CharModel(nn.Module):
    def __init__(self, vocab: int, bits: Optional[int] = None) -> None:
        super().__init__()
        if bits is None:
            self.embed = nn.Embedding(vocab, EMBED)
            self.lstm = nn.LSTM(EMBED, HIDDEN, batch_first=True)
            self.head = nn.Linear(HIDDEN, vocab)
        else:
            self.embed = qnn.QuantEmbedding(vocab, EMBED, weight_bit_width=bits)
            self.lstm = qnn.QuantLSTM(
                EMBED,
                HIDDEN,
                batch_first=True,
                weight_bit_width=bits,
                io_bit_width=bits,
                gate_acc_bit_width=bits,
                sigmoid_bit_width=bits,
                tanh_bit_width=bits,
                cell_state_bit_width=bits,
            )
            self.head = qnn.QuantLinear(HIDDEN, vocab, weight_bit_width=bits)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out)


def bits_per_char(model: nn.Module, ids: Tensor) -> float:
    """Mean cross-entropy over the held-out text in fixed windows, in bits."""
    model.eval()
    with torch.no_grad():
        n = (len(ids) - 1) // SEQ
        x = ids[: n * SEQ].view(n, SEQ)
        y = ids[1 : n * SEQ + 1].view(n, SEQ)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    model.train()
    return loss.item() / math.log(2)


def train(model: nn.Module, ids: Tensor, steps: int, lr: float, seed: int) -> float:
    """Adam on random windows; returns the median step time in seconds."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    times = []
    model.train()
    for _ in range(steps):
        x, y = batch(ids, generator)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--float-steps", type=int, default=300)
    parser.add_argument("--qat-steps", type=int, default=100)
    parser.add_argument("--bits", type=int, default=8, help="weight/activation bit width")
    parser.add_argument(
        "--stats-steps", type=int, default=30, help="passes collecting activation statistics"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    train_ids, test_ids, vocab = load_text()

    float_model = CharModel(vocab)
    float_step = train(float_model, train_ids, args.float_steps, 1e-2, args.seed)
    float_bpc = bits_per_char(float_model, test_ids)

    quant_model = CharModel(vocab, bits=args.bits)
    # A float state_dict loads strictly: nn.LSTM's stacked gate rows map onto QuantLSTM's gates.
    quant_model.load_state_dict(float_model.state_dict())
    # A few training-mode passes without gradients collect the activation statistics.
    generator = torch.Generator().manual_seed(args.seed + 1)
    with torch.no_grad():
        for _ in range(args.stats_steps):
            quant_model(batch(train_ids, generator)[0])
    before_bpc = bits_per_char(quant_model, test_ids)
    quant_step = train(quant_model, train_ids, args.qat_steps, 2e-3, args.seed + 2)
    after_bpc = bits_per_char(quant_model, test_ids)

    print(f"{len(train_ids)} training / {len(test_ids)} held-out characters, vocabulary {vocab}")
    print("| model | held-out bits per character | training step (ms) |")
    print("| --- | ---: | ---: |")
    print(f"| float LSTM | {float_bpc:.3f} | {1e3 * float_step:.1f} |")
    print(f"| W{args.bits}A{args.bits} QuantLSTM, float weights | {before_bpc:.3f} | |")
    print(
        f"| W{args.bits}A{args.bits} QuantLSTM after QAT | {after_bpc:.3f} | {1e3 * quant_step:.1f} |"
    )
    return {"float": float_bpc, "quant_before": before_bpc, "quant_after": after_bpc}


if __name__ == "__main__":
    main()
