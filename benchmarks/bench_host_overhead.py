#!/usr/bin/env python
"""Host overhead of a QAT training step: a tiny ResNet-18 on one CPU thread, the CPU stand-in
for a GPU step whose time is set by the host (Python, dispatcher, autograd), not the kernels.

    python benchmarks/bench_host_overhead.py                    # about 1 min on 2 idle cores
    python benchmarks/bench_host_overhead.py --repeats 9 --warmup 5 --json /tmp/host.json
    python benchmarks/bench_host_overhead.py --jit 0 --brevitas-python none   # ours and torch only

Model: torchvision's ResNet-18 layout (BasicBlock, [2, 2, 2, 2]: conv7x7 stride 2, BatchNorm,
ReLU, maxpool 3x3 stride 2; four stages, the first block of stages 2-4 with stride 2 and a 1x1
conv-BN downsample; global average pool; linear to 1000 classes), written here (torchvision is
not installed), with every channel count divided by 8 (8-16-32-64), batch 2 of 3x8x8 inputs. The
tensors are so small that the arithmetic costs next to nothing: what is timed is the per-op
work of the host, the part a GPU step pays per kernel launch. Each block has its own ReLU
modules (torchvision reuses one; a quantizer has state). torch.set_num_threads(1) (--threads).
Training step: zero_grad, forward, cross-entropy on a fixed random batch, backward, SGD step
(lr 0.01, momentum 0.9); the same seed, so the same initial weights, for every variant.

Variants:
  float     torch.nn.
  native    torch.nn with PyTorch's learnable fake quantization,
            torch._fake_quantize_learnable_per_tensor_affine, on the weight of every conv/linear
            (int8, [-127, 127], scale initialised to max|w| / 127) and on the output of every ReLU
            (uint8, [0, 255]); scale learned, zero point fixed at 0 (a learned one leaves the
            range and the op raises). W8A8 per tensor, built by hand. Unlike the libraries'
            Int8WeightPerTensorFloat, whose scale is max|w| taken again at every step, the weight
            scale is a parameter here (one reduction less per weight).
  ops       torch.nn with brevitas_cpp's fused ops called in the layers' own forward, no proxy
            or quantizer module: abs_max_int_quant on every weight (Int8WeightPerTensorFloat's
            arguments) and learned_int_quant with its ReLU on every activation (the learned
            phase of Uint8ActPerTensorFloat, value a 0-dim parameter). The floor of any module
            design over these ops: "ours" minus "ops" is the cost of Brevitas's layering.
  ours      brevitas_cpp.nn: QuantConv2d/QuantLinear(weight_quant=Int8WeightPerTensorFloat),
            QuantReLU(act_quant=Uint8ActPerTensorFloat, collect_stats_steps=--stats-steps);
            BatchNorm, pooling and the residual additions stay torch.nn, plain tensors between
            layers. Timed in the learned-scale phase (past the statistics steps).
  brevitas  Brevitas 0.12.1's brevitas.nn, the same model, when an interpreter imports it
            (--brevitas-python, default /tmp/brevenv/bin/python). Brevitas 0.12 calls
            Tensor.rename(None), which torch 2.13 no longer has: a no-op Tensor.rename is added
            before brevitas is imported.

BREVITAS_JIT is read at import, so each --jit setting runs in its own worker subprocess (with
that variable set; it applies to ours and to Brevitas). Every worker times all its variants,
float included, with warm-up and then --repeats reps interleaved round-robin (the starting
variant rotates), each rep a loop of --steps steps; ms/step is the median over reps and
"x float" divides by the float step of the same worker, so that load changes on a shared
machine hit every variant alike. Compare ratios, not absolute times, across runs.

Op counts per step (counts, not times: they do not depend on the load):
  ops     ops that reach the backend below autograd, counted by a TorchDispatchMode, with views
          and other aliasing ops (OpOverload.is_view), bare allocations (empty, empty_strided,
          empty_like) and the profiler's record_function markers left out: the stand-in for
          "kernels per step" on CUDA (a composite op that CUDA runs as several kernels still
          counts once). The CPU SGD step is a loop over parameters (torch's default foreach
          implementation is for CUDA tensors only), so about 3 ops per parameter tensor are
          optimizer ops that CUDA would group in a few multi-tensor kernels; "custom" is the
          part outside aten (brevitas_cpp's ops).
  calls   every dispatcher call seen by torch.profiler on the CPU, nested calls included (the
          "ops/step" of bench_qat_step.py).

This is a script, not a test: nothing is asserted.
"""

import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import os
import site
import statistics
import subprocess
import sys
import time

from bench_qat_step import jit_enabled  # the worker runs from benchmarks/

DEFAULT_BREVITAS_PYTHON = "/tmp/brevenv/bin/python"
VARIANTS = ("float", "native", "ops", "ours", "brevitas")
WIDTHS = (8, 16, 32, 64)  # torchvision's 64-128-256-512 divided by 8
NUM_CLASSES = 1000
BATCH, INPUT_SHAPE = 2, (3, 8, 8)
# Ops that allocate without writing (no kernel launch on CUDA), left out of ops/step like views.
NO_KERNEL = {"empty", "empty_strided", "empty_like"}


# ----------------------------------------------------------------------------------------------
# Worker (subprocess): build the variants, time them interleaved, count their ops.
# ----------------------------------------------------------------------------------------------


def make_brevitas_cpp_importable(host_sites):
    """In an interpreter whose site-packages lack brevitas_cpp (the Brevitas venv), take it from
    the orchestrator's: append those directories (after this interpreter's own, so that its torch
    stays first) and run the editable-install hook they hold, if any."""
    spec = importlib.util.find_spec("brevitas_cpp")
    if spec is not None:
        # A source checkout on sys.path (no compiled _C next to it) does not count.
        dirs = list(spec.submodule_search_locations or [])
        if spec.loader is not None and not isinstance(
            spec.loader, importlib.machinery.SourceFileLoader
        ):
            return  # an editable-install finder that maps the compiled modules
        if any(f.startswith("_C.") for d in dirs if os.path.isdir(d) for f in os.listdir(d)):
            return
    for path in host_sites:
        if not os.path.isdir(path):
            continue
        if path not in sys.path:
            sys.path.append(path)
        for name in sorted(os.listdir(path)):
            if name.startswith("_editable") and "brevitas_cpp" in name and name.endswith(".py"):
                importlib.import_module(name[:-3])


def import_qnn(lib):
    if lib == "ours":
        import brevitas_cpp.nn as qnn
        from brevitas_cpp.quant import Int8WeightPerTensorFloat, Uint8ActPerTensorFloat
    else:
        import torch

        if not hasattr(torch.Tensor, "rename"):
            # Brevitas 0.12's unpack_input calls inp.rename(None) (drop named dims); torch 2.13
            # removed named tensors. A no-op is exact for our unnamed inputs.
            torch.Tensor.rename = lambda self, *names, **rename_map: self
        import brevitas.nn as qnn
        from brevitas.quant import Int8WeightPerTensorFloat, Uint8ActPerTensorFloat
    return qnn, Int8WeightPerTensorFloat, Uint8ActPerTensorFloat


def _define_modules():
    """Module classes, defined in the worker only (the orchestrator never imports torch)."""
    global Layers, ResNet18
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class NativeFakeQuant(nn.Module):
        def __init__(self, qmin, qmax, scale):
            super().__init__()
            self.qmin, self.qmax = qmin, qmax
            self.scale = nn.Parameter(torch.tensor([float(scale)]))
            self.register_buffer("zero_point", torch.tensor([0.0]))

        def forward(self, x):
            return torch._fake_quantize_learnable_per_tensor_affine(
                x, self.scale, self.zero_point, self.qmin, self.qmax, 1.0
            )

    def weight_fq(weight):
        return NativeFakeQuant(-127, 127, max(weight.detach().abs().max().item() / 127, 1e-8))

    class NativeConv2d(nn.Conv2d):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.weight_fq = weight_fq(self.weight)

        def forward(self, x):
            return self._conv_forward(x, self.weight_fq(self.weight), self.bias)

    class NativeLinear(nn.Linear):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.weight_fq = weight_fq(self.weight)

        def forward(self, x):
            return F.linear(x, self.weight_fq(self.weight), self.bias)

    class NativeReLU(nn.Module):
        def __init__(self):
            super().__init__()
            self.act_fq = NativeFakeQuant(0, 255, 4.0 / 255)

        def forward(self, x):
            return self.act_fq(F.relu(x))

    # The "ops" variant: abs_max_int_quant called in the layers' own forward, no proxy.
    ops_bit_width = torch.tensor(8.0)

    def ops_weight(weight):
        # Int8WeightPerTensorFloat's arguments: narrow signed 8 bits, scale max|w| / 127.
        y, _ = torch.ops.brevitas_cpp.abs_max_int_quant(
            weight, ops_bit_width, None, True, True, None, "round", False
        )
        return y

    class OpsConv2d(nn.Conv2d):
        def forward(self, x):
            return self._conv_forward(x, ops_weight(self.weight), self.bias)

    class OpsLinear(nn.Linear):
        def forward(self, x):
            return F.linear(x, ops_weight(self.weight), self.bias)

    class OpsReLU(nn.Module):
        """ReLU then Uint8ActPerTensorFloat's learned phase in one learned_int_quant call."""

        def __init__(self):
            super().__init__()
            self.value = nn.Parameter(torch.tensor(4.0))
            for name, v in (("threshold", 255.0), ("zero_point", 0.0), ("bit_width", 8.0)):
                self.register_buffer(name, torch.tensor(v))

        def forward(self, x):
            y, _ = torch.ops.brevitas_cpp.learned_int_quant(
                x, self.value, self.threshold, self.zero_point, self.bit_width,
                False, False, None, "round", False, True,
            )  # fmt: skip
            return y

    class _Layers:
        """Layer factory: one model code for every variant."""

        def __init__(self, lib, stats_steps):
            self.lib, self.stats_steps = lib, stats_steps
            if lib in ("ours", "brevitas"):
                self.qnn, self.wq, self.aq = import_qnn(lib)
            if lib == "ops":
                import brevitas_cpp  # noqa: F401  (registers torch.ops.brevitas_cpp)

        def conv(self, cin, cout, k, stride=1, padding=0):
            kw = dict(stride=stride, padding=padding, bias=False)
            if self.lib == "float":
                return nn.Conv2d(cin, cout, k, **kw)
            if self.lib == "native":
                return NativeConv2d(cin, cout, k, **kw)
            if self.lib == "ops":
                return OpsConv2d(cin, cout, k, **kw)
            return self.qnn.QuantConv2d(cin, cout, k, weight_quant=self.wq, **kw)

        def linear(self, cin, cout):
            if self.lib == "float":
                return nn.Linear(cin, cout)
            if self.lib == "native":
                return NativeLinear(cin, cout)
            if self.lib == "ops":
                return OpsLinear(cin, cout)
            return self.qnn.QuantLinear(cin, cout, bias=True, weight_quant=self.wq)

        def relu(self):
            if self.lib == "float":
                return nn.ReLU()
            if self.lib == "native":
                return NativeReLU()
            if self.lib == "ops":
                return OpsReLU()
            return self.qnn.QuantReLU(act_quant=self.aq, collect_stats_steps=self.stats_steps)

    class BasicBlock(nn.Module):
        def __init__(self, L, inplanes, planes, stride):
            super().__init__()
            self.conv1 = L.conv(inplanes, planes, 3, stride, 1)
            self.bn1, self.relu1 = nn.BatchNorm2d(planes), L.relu()
            self.conv2 = L.conv(planes, planes, 3, 1, 1)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(
                    L.conv(inplanes, planes, 1, stride), nn.BatchNorm2d(planes)
                )
            self.relu2 = L.relu()

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(out + identity)

    class _ResNet18(nn.Module):
        def __init__(self, L):
            super().__init__()
            self.conv1 = L.conv(3, WIDTHS[0], 7, 2, 3)
            self.bn1, self.relu = nn.BatchNorm2d(WIDTHS[0]), L.relu()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, cin = [], WIDTHS[0]
            for i, width in enumerate(WIDTHS):
                stride = 1 if i == 0 else 2
                stages.append(nn.Sequential(BasicBlock(L, cin, width, stride),
                                            BasicBlock(L, width, width, 1)))  # fmt: skip
                cin = width
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = L.linear(WIDTHS[-1], NUM_CLASSES)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    Layers, ResNet18 = _Layers, _ResNet18


class Variant:
    def __init__(self, lib, stats_steps):
        import torch
        import torch.nn.functional as F

        torch.manual_seed(0)  # the same initial weights for every variant
        self.model = ResNet18(Layers(lib, stats_steps)).train()
        gen = torch.Generator().manual_seed(1)
        x = torch.randn((BATCH,) + INPUT_SHAPE, generator=gen)
        target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.forward_loss = lambda: F.cross_entropy(self.model(x), target)
        self.lib = lib

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.forward_loss()
        loss.backward()
        self.opt.step()
        return loss


def count_dispatched(step):
    """(ops below autograd, views left out; of which custom, i.e. not aten) in one step."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"ops": 0, "custom": 0}

    class Counter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            no_kernel = (
                getattr(func, "is_view", False)
                or func.namespace == "profiler"  # record_function markers (optimizer.step)
                or func.__name__.split(".")[0] in NO_KERNEL
            )
            if not no_kernel:
                counts["ops"] += 1
                if func.namespace not in ("aten", "prim", "prims"):
                    counts["custom"] += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        step()
    return counts["ops"], counts["custom"]


def count_profiler_calls(step):
    """Dispatcher calls (ATen and custom ops, nested calls included) in one step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(1 for e in prof.events() if "::" in e.name and not e.name.startswith("autograd::"))


def worker(cfg):
    import torch

    torch.set_num_threads(cfg["threads"])
    _define_modules()
    runs, out = [], []
    for lib in cfg["variants"]:
        run = Variant(lib, cfg["stats_steps"])
        loss0 = run.step().item()
        # Past the statistics steps (learned-scale phase), then warm-up (which also lets the
        # TorchScript profiling executor optimize under BREVITAS_JIT=1).
        for _ in range(cfg["stats_steps"] + cfg["warmup"]):
            run.step()
        runs.append(run)
        out.append({"variant": lib, "loss0": loss0, "jit_enabled": jit_enabled(lib), "t": []})
    steps = cfg["steps"]
    for rep in range(cfg["repeats"]):
        order = list(range(len(runs)))
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for i in order:
            step = runs[i].step
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            out[i]["t"].append((time.perf_counter() - t0) / steps)
    for o, run in zip(out, runs):
        times = o.pop("t")
        o["step_s"] = statistics.median(times)
        o["step_s_min"] = min(times)
        o["ops"], o["custom_ops"] = count_dispatched(run.step)
        o["calls"] = count_profiler_calls(run.step)
    return {"torch": torch.__version__, "python": sys.executable, "results": out}


# ----------------------------------------------------------------------------------------------
# Orchestrator: one worker per BREVITAS_JIT setting, then the table.
# ----------------------------------------------------------------------------------------------


def host_site_packages():
    paths = list(site.getsitepackages())
    user = site.getusersitepackages()
    return paths + ([user] if isinstance(user, str) else [])


def run_worker(python, cfg, jit):
    env = dict(os.environ, BREVITAS_JIT=str(jit))
    cmd = [python, "-W", "ignore", os.path.abspath(__file__), "--worker", json.dumps(cfg)]
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        err = (r.stderr or "").strip().splitlines()
        return {"error": err[-1] if err else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def brevitas_probe(python, host_sites):
    """'' when `python` imports brevitas and brevitas_cpp (as the worker does), else why not."""
    code = (
        "import sys, json; sys.path.insert(0, %r); import bench_host_overhead as b; "
        "b.make_brevitas_cpp_importable(json.loads(%r)); import brevitas, brevitas_cpp"
    ) % (os.path.dirname(os.path.abspath(__file__)), json.dumps(host_sites))
    try:
        r = subprocess.run(
            [python, "-W", "ignore", "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if r.returncode != 0:
        err = r.stderr.strip().splitlines()
        return err[-1] if err else f"exit {r.returncode}"
    return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15, help="timed reps per variant (default 15)")
    ap.add_argument(
        "--warmup", type=int, default=10, help="warm-up steps past the statistics (default 10)"
    )
    ap.add_argument("--steps", type=int, default=10, help="training steps per rep (default 10)")
    ap.add_argument(
        "--stats-steps",
        type=int,
        default=3,
        help="collect_stats_steps of the activation quantizers (default 3)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--jit", default="0,1", help="BREVITAS_JIT settings to run (default 0,1)")
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"subset of {','.join(VARIANTS)}"
    )
    ap.add_argument(
        "--brevitas-python",
        default=None,
        help=f"interpreter that imports brevitas (default: this one if it does, else "
        f"{DEFAULT_BREVITAS_PYTHON}); 'none' skips Brevitas",
    )
    ap.add_argument("--json", default=None, metavar="OUT", help="also write the results as JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker is not None:
        cfg = json.loads(args.worker)
        make_brevitas_cpp_importable(cfg["host_sites"])
        print(json.dumps(worker(cfg)))
        return

    variants = [v for v in args.variants.split(",") if v]
    if "float" not in variants:
        variants.insert(0, "float")  # the baseline of every ratio
    host_sites = host_site_packages()
    python, brev_note = sys.executable, ""
    if "brevitas" in variants:
        if args.brevitas_python == "none":
            brev_note = "--brevitas-python none"
        else:
            candidates = [args.brevitas_python] if args.brevitas_python else []
            if not candidates:
                if importlib.util.find_spec("brevitas") is not None:
                    candidates = [sys.executable]
                elif os.path.exists(DEFAULT_BREVITAS_PYTHON):
                    candidates = [DEFAULT_BREVITAS_PYTHON]
            if not candidates:
                brev_note = f"not importable here and {DEFAULT_BREVITAS_PYTHON} does not exist"
            else:
                brev_note = brevitas_probe(candidates[0], host_sites)
                if not brev_note:
                    python = candidates[0]
        if brev_note:
            variants.remove("brevitas")
    jits = [int(j) for j in args.jit.split(",")]
    cfg = {
        "variants": variants,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "steps": args.steps,
        "stats_steps": args.stats_steps,
        "threads": args.threads,
        "host_sites": host_sites,
    }
    print(
        f"ResNet-18 (BasicBlock [2,2,2,2], channels / 8), batch {BATCH} of "
        f"{'x'.join(map(str, INPUT_SHAPE))}, {NUM_CLASSES} classes, threads={args.threads}; "
        f"timing interpreter {python}"
    )
    print(
        "Brevitas: " + (f"skipped: brevitas not importable ({brev_note})" if brev_note else "run")
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; repeats={args.repeats} "
        f"(median) of {args.steps} steps, warm-up {args.warmup} steps after "
        f"{args.stats_steps} statistics steps; one worker process per BREVITAS_JIT setting, "
        "variants interleaved in it\n",
        flush=True,
    )
    start = time.perf_counter()
    rows, raw = [], {}
    for jit in jits:
        res = run_worker(python, cfg, jit)
        raw[f"jit{jit}"] = res
        if "error" in res:
            print(f"  [BREVITAS_JIT={jit}] worker FAILED: {res['error']}", flush=True)
            continue
        float_s = next(r["step_s"] for r in res["results"] if r["variant"] == "float")
        for r in res["results"]:
            r["x_float"] = r["step_s"] / float_s
            rows.append((jit, r))
        print(
            f"  [BREVITAS_JIT={jit}] "
            + ", ".join(f"{r['variant']} {r['step_s'] * 1e3:.2f} ms" for r in res["results"]),
            flush=True,
        )

    head = (
        f"{'variant':<9} {'JIT':>3} {'ms/step':>8} {'(min)':>7} {'x float':>7} {'ops/step':>8} "
        f"{'(custom)':>8} {'x float':>7} {'calls/step':>10} {'loss0':>8}"
    )
    print("\n" + head)
    print("-" * len(head))
    for jit in jits:
        fl = next((r for j, r in rows if j == jit and r["variant"] == "float"), None)
        for j, r in rows:
            if j != jit:
                continue
            name = r["variant"]
            if r["jit_enabled"] is not None and r["jit_enabled"] != bool(jit):
                name += " (!)"  # the library did not take BREVITAS_JIT as asked
            print(
                f"{name:<9} {jit:>3} {r['step_s'] * 1e3:8.2f} {r['step_s_min'] * 1e3:7.2f} "
                f"{r['x_float']:7.2f} {r['ops']:8d} {r['custom_ops']:8d} "
                f"{r['ops'] / fl['ops']:7.2f} {r['calls']:10d} {r['loss0']:8.5f}"
            )
        ours = next((r for j, r in rows if j == jit and r["variant"] == "ours"), None)
        others = [r for j, r in rows if j == jit and r["variant"] in ("brevitas", "native")]
        if ours is not None:
            for r in others:
                print(f"  {r['variant']} / ours, JIT={jit}: {r['step_s'] / ours['step_s']:.2f}")
    print(
        "\n(ms/step: median over reps, (min) the fastest rep; x float: over the float step of the "
        "same worker process;\n ops/step: ops below autograd per step, views left out "
        "(TorchDispatchMode), the stand-in for CUDA kernels per step,\n (custom) those not in "
        "aten; calls/step: dispatcher calls, nested included (torch.profiler); loss0: first-step\n "
        "loss, equal for ours and Brevitas when the models match; (!) = the library did not run "
        "with the BREVITAS_JIT asked for)"
    )
    print(
        f"total time {time.perf_counter() - start:.1f} s, load average now {os.getloadavg()[0]:.2f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "config": {k: v for k, v in cfg.items() if k != "host_sites"},
                    "brevitas": brev_note or "run",
                    "rows": [dict(r, jit=j) for j, r in rows],
                    "workers": {k: v for k, v in raw.items() if "error" in v},
                },
                f,
                indent=1,
            )
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
