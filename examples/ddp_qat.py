"""Quantization-aware training with DistributedDataParallel.

One process per device, launched by torchrun (which sets RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR and MASTER_PORT):

    torchrun --nproc_per_node=2 examples/ddp_qat.py                 # gloo on CPU
    torchrun --nproc_per_node=2 examples/ddp_qat.py --resume        # continue from the checkpoint

The activation quantizers collect statistics for their first COLLECT_STATS_STEPS training
batches, then learn their scale from that initial value. Each rank sees its own shard of the
data, so brevitas_cpp averages the statistics over the ranks while collecting (see
brevitas_cpp.distributed): every replica starts learning from the same scale, and the script
checks that the learned scales are still identical on every rank at the end.
Works the same with BREVITAS_JIT=1 (TorchScript quantizer blocks).
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import brevitas_cpp
from brevitas_cpp.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU

COLLECT_STATS_STEPS = 10  # Brevitas's default is 300: shortened for a short demo


def build_model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights in every run: a resumed run can be compared
    return nn.Sequential(
        QuantIdentity(collect_stats_steps=COLLECT_STATS_STEPS),
        QuantConv2d(1, 8, 3),
        QuantReLU(collect_stats_steps=COLLECT_STATS_STEPS),
        QuantConv2d(8, 8, 3),
        QuantReLU(collect_stats_steps=COLLECT_STATS_STEPS),
        nn.Flatten(),
        QuantLinear(8 * 8 * 8, 4, bias=True),
    )


def synthetic_dataset() -> TensorDataset:
    # The same tensors on every rank (fixed seed); DistributedSampler gives each rank a shard.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 1, 12, 12, generator=gen)
    y = (x[:, 0, :6].sum((1, 2)) > 0).long() * 2 + (x[:, 0, :, :6].sum((1, 2)) > 0).long()
    return TensorDataset(x, y)


def learned_scales(model: nn.Module) -> dict:
    return {
        name: module.act_quant.scale().item()
        for name, module in model.named_modules()
        if isinstance(module, (QuantIdentity, QuantReLU))
    }


def train(args: argparse.Namespace, use_cuda: bool) -> None:
    rank, local_rank = dist.get_rank(), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start_epoch = 0
    if args.resume:
        # Every rank loads into a freshly built model (copy.deepcopy of TorchScript quantizer
        # blocks is refused). Loading keeps the model's Parameter objects, so the optimizer built
        # above steps the loaded scales; a checkpoint saved during the statistics warm-up goes
        # on collecting where it stopped (the state_dict's metadata carries the step counters).
        checkpoint = torch.load(args.checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start_epoch = checkpoint["epoch"] + 1
    # No find_unused_parameters: scales waiting for their initialisation are already in the
    # graph (with a zero gradient).
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)

    dataset = synthetic_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    for epoch in range(start_epoch, start_epoch + args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(ddp(x), y)
            loss.backward()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}: last batch loss {loss.item():.4f}")
            torch.save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                args.checkpoint,
            )
        dist.barrier()  # the checkpoint is complete before anyone may read it

    ddp.eval()
    scales = [None] * dist.get_world_size()
    dist.all_gather_object(scales, learned_scales(model))
    if rank == 0:
        for name, scale in scales[0].items():
            print(f"learned scale {name}: {scale:.6g}")
        assert all(s == scales[0] for s in scales), f"replicas diverged: {scales}"
        print(f"learned scales identical on all {len(scales)} ranks; checkpoint {args.checkpoint}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--checkpoint", default="ddp_qat_checkpoint.pt")
    parser.add_argument("--resume", action="store_true", help="start from --checkpoint")
    args = parser.parse_args()

    # NCCL needs CUDA tensors, which the brevitas_cpp ops only take in a CUDA build.
    use_cuda = torch.cuda.is_available() and brevitas_cpp.build_info()["cuda"]
    dist.init_process_group("nccl" if use_cuda else "gloo")
    try:
        train(args, use_cuda)
    finally:
        # DDP is gone with train's frame, so the process group is freed here, with the GIL
        # released. Freed by DDP's reducer, a gloo group joins its worker threads holding the
        # GIL while one of them waits for it to free a tensor: a hang at exit
        # (pytorch/pytorch#56297).
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
