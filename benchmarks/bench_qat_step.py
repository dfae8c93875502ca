#!/usr/bin/env python
"""QAT training-step benchmark: float vs brevitas_cpp.nn vs Brevitas, W8A8/W4A4, JIT on/off.

Times one training step (forward + backward + optimizer step) of small CNNs built with torch.nn
(float), brevitas_cpp.nn (W8A8, W4A4) and, where it can be run, Brevitas's brevitas.nn (the same
W8A8/W4A4 models), on CPU, with BREVITAS_JIT=0 and =1.

    python benchmarks/bench_qat_step.py              # full run (3 min on 2 idle cores; 5-10 min loaded)
    python benchmarks/bench_qat_step.py --quick      # demo CNN, W8A8, no memory runs (10 s idle)
    python benchmarks/bench_qat_step.py --threads 1  # torch.set_num_threads in every run (default 2)
    python benchmarks/bench_qat_step.py --profile resnet:ours:8   # torch.profiler tables instead
    python benchmarks/bench_qat_step.py --device cuda  # GPU: ResNet-18 (bench_qat_step_cuda.py)
    python benchmarks/bench_qat_step.py --compile    # torch.compile'd float and W8A8 (see below)
    python benchmarks/bench_qat_step.py --compile --compile-backend aot_eager --models cnn

Models (identical code for the three libraries; layers differ only in the module namespace):
  cnn     batch 64 of 1x8x8 (the digits demo): [input quant] conv3x3 1->16, relu, conv3x3
          16->32, relu, maxpool 2, linear 512->10.
  resnet  batch 32 of 3x32x32: [input quant] conv3x3 3->16, bn, relu; three basic blocks
          (16->16; 16->32 stride 2; 32->64 stride 2; each conv-bn-relu-conv-bn plus a shortcut,
          a 1x1 conv-bn where the shape changes, summed by QuantEltwiseAdd, then relu);
          global average pool, linear 64->10.
  float   torch.nn layers (nn.Identity for the input quantizer, `a + b` for the add).
  WnAn    QuantConv2d/QuantLinear with the default per-tensor float weight quantizer at
          weight_bit_width=N (float bias), QuantReLU (unsigned) and QuantIdentity (signed)
          at bit_width=N, QuantEltwiseAdd with N-bit input and output quantizers; plain tensors
          between layers (return_quant_tensor=False); BatchNorm and pooling stay torch.nn.
Activation scales: runtime statistics for --stats-steps steps (collect_stats_steps), then
learned parameters, as in a real QAT run. SGD with momentum, cross-entropy on a fixed random
batch, the same seed (so the same initial weights) for every library.

Timing: BREVITAS_JIT is read at import, so each JIT setting runs in its own subprocess; all
configurations of one model are timed in one subprocess with their reps interleaved round-robin,
so that load changes on a shared machine hit every configuration alike.
  step      the steady, learned-scale phase: median (--stat min: minimum) over reps of a loop of
            steps (about 0.2 s), after warm-up steps (which also let the TorchScript profiling
            executor optimize), wall time (time.perf_counter).
  cpu       the same loops in process CPU time (time.process_time). With one thread it is what
            the step costs when the process is not preempted, hence much steadier than wall
            time on a loaded machine; with more threads it adds up the threads' CPU time.
  stats     median wall time of single steps during the statistics phase (first two skipped).
  ops/step  dispatcher calls (ATen and custom ops, nested calls included) in one step, from
            torch.profiler: a count that does not depend on the machine's load.

Memory: one fresh subprocess per configuration. tracemalloc does not see torch's CPU
allocations, so "peakRSS+" is the growth of the process's peak resident set
(resource.getrusage ru_maxrss) from just before the first training step (libraries imported;
model, optimizer and data built) to after statistics, warm-up and a few learned steps:
activations, gradients, optimizer state, allocator caches and any scripting work, as the OS saw
it. "saved" is exact: the bytes of the distinct storages autograd saves for backward in one
step (torch.autograd.graph.saved_tensors_hooks), the part that grows with the batch size.

Brevitas: when `import brevitas` fails in this interpreter, the Brevitas runs use
--brevitas-python (default /tmp/brevenv/bin/python when it exists; that venv sees this
interpreter's site-packages, so its timing process also imports torch and brevitas_cpp; ours is
always imported from this checkout). Brevitas 0.12 calls Tensor.rename(None), which torch 2.13
no longer has: a no-op Tensor.rename is added in the worker processes, just before brevitas is
imported, for the Brevitas models only. Targets: QAT step / float step <= 1.3 in the learned
phase and <= 1.6 in the statistics phase, Brevitas step / ours >= 3, and dispatcher calls per
step <= 1.6x float's (printed met / NOT met, never asserted). The first-step loss of ours and Brevitas's is printed as a
check that the two built the same model.

--compile: the float and the quant models (ours only; default --bits 8 and --jit 0 in this
mode) each wrapped in torch.compile(model, backend=--compile-backend, default inductor), the
loss, backward and SGD step staying eager; no memory runs. All configurations of one model in one
process, timed as above (reps interleaved, after the statistics phase and warm-up), with the
eager float model beside them as a reference. Each model gets its own copy of its top-level
forward's code object, so that dynamo's caches and its recompile limit
(torch._dynamo.config.recompile_limit, 8) are per model, not shared by the configurations.
Reported per configuration, from a backend wrapper that counts the graphs handed to the compiler
and from torch._dynamo.utils.counters:
  graphs     graphs compiled in the first step (1 when the forward is one graph);
  breaks     graph breaks met while compiling the first step (counters["graph_break"]);
  recompiles graphs compiled after the first step: during the statistics phase (steps 2 to
             collect_stats_steps), across the hand-over to learned scales (the next two steps:
             the step that turns the statistics into parameters and the first learned one), and
             later (the warm-up; 0 when the learned phase is stable); the issue's target is at
             most one across the hand-over; the first recompile reason is printed;
  limit      the step at which dynamo hit its recompile limit, if it did: from then on the frame
             that hit it runs eagerly (the whole model when that frame is its forward, as in the
             statistics phase of the quant models; with graph breaks, often a layer's forward,
             whose code all layers of its class share), so the timed step is (partly) eager.
"""

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time

DEFAULT_BREVITAS_PYTHON = "/tmp/brevenv/bin/python"
MODELS = ("cnn", "resnet")
# Issue 16's targets: learned-scale step and statistics-phase step over float's, Brevitas's step
# over ours, and dispatcher calls per step over float's.
LEARNED_TARGET, STATS_TARGET, BREVITAS_TARGET, OPS_TARGET = 1.3, 1.6, 3.0, 1.6


# ----------------------------------------------------------------------------------------------
# Workers (subprocesses): build models, time their training steps, report JSON on stdout.
# ----------------------------------------------------------------------------------------------


def import_qnn(lib):
    """The layer namespace for `lib` (None for float)."""
    if lib == "float":
        return None
    if lib == "ours":
        from _checkout import import_brevitas_cpp_nn

        return import_brevitas_cpp_nn()
    import torch

    if not hasattr(torch.Tensor, "rename"):
        # Brevitas 0.12's unpack_input calls inp.rename(None) (drop named dims); torch 2.13
        # removed named tensors. A no-op is exact for our unnamed inputs.
        torch.Tensor.rename = lambda self, *names, **rename_map: self
    import brevitas.nn as qnn

    return qnn


class Layers:
    """Layer factory: the same model code builds float, brevitas_cpp and Brevitas models."""

    def __init__(self, qnn, bits, stats_steps):
        self.qnn, self.bits, self.stats_steps = qnn, bits, stats_steps

    def input_quant(self):
        import torch.nn as nn

        if self.qnn is None:
            return nn.Identity()
        return self.qnn.QuantIdentity(bit_width=self.bits, collect_stats_steps=self.stats_steps)

    def conv(self, cin, cout, k, stride=1, padding=0, bias=True):
        import torch.nn as nn

        if self.qnn is None:
            return nn.Conv2d(cin, cout, k, stride=stride, padding=padding, bias=bias)
        return self.qnn.QuantConv2d(
            cin, cout, k, stride=stride, padding=padding, bias=bias, weight_bit_width=self.bits
        )

    def linear(self, cin, cout):
        import torch.nn as nn

        if self.qnn is None:
            return nn.Linear(cin, cout)
        return self.qnn.QuantLinear(cin, cout, bias=True, weight_bit_width=self.bits)

    def relu(self):
        import torch.nn as nn

        if self.qnn is None:
            return nn.ReLU()
        return self.qnn.QuantReLU(bit_width=self.bits, collect_stats_steps=self.stats_steps)

    def add(self):
        if self.qnn is None:
            return FloatAdd()
        return self.qnn.QuantEltwiseAdd(
            input_bit_width=self.bits,
            output_bit_width=self.bits,
            input_collect_stats_steps=self.stats_steps,
            output_collect_stats_steps=self.stats_steps,
        )


def _module_classes():
    # Defined lazily so that the orchestrator never imports torch (keeps its start cheap).
    global FloatAdd, DemoCNN, BasicBlock, SmallResNet
    import torch
    import torch.nn as nn

    class FloatAdd(nn.Module):
        def forward(self, a, b):
            return a + b

    class DemoCNN(nn.Module):
        def __init__(self, L):
            super().__init__()
            self.inp = L.input_quant()
            self.conv1, self.relu1 = L.conv(1, 16, 3, padding=1), L.relu()
            self.conv2, self.relu2 = L.conv(16, 32, 3, padding=1), L.relu()
            self.pool = nn.MaxPool2d(2)
            self.fc = L.linear(32 * 4 * 4, 10)

        def forward(self, x):
            x = self.relu1(self.conv1(self.inp(x)))
            x = self.pool(self.relu2(self.conv2(x)))
            return self.fc(torch.flatten(x, 1))

    class BasicBlock(nn.Module):
        def __init__(self, L, cin, cout, stride):
            super().__init__()
            self.conv1 = L.conv(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1, self.relu1 = nn.BatchNorm2d(cout), L.relu()
            self.conv2 = L.conv(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Identity()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(
                    L.conv(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
                )
            self.add, self.relu2 = L.add(), L.relu()

        def forward(self, x):
            y = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
            return self.relu2(self.add(y, self.shortcut(x)))

    class SmallResNet(nn.Module):
        def __init__(self, L):
            super().__init__()
            self.inp = L.input_quant()
            self.stem = nn.Sequential(
                L.conv(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), L.relu()
            )
            self.blocks = nn.Sequential(
                BasicBlock(L, 16, 16, 1), BasicBlock(L, 16, 32, 2), BasicBlock(L, 32, 64, 2)
            )
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = L.linear(64, 10)

        def forward(self, x):
            x = self.blocks(self.stem(self.inp(x)))
            return self.fc(torch.flatten(self.pool(x), 1))


MODEL_INPUT = {"cnn": (64, (1, 8, 8)), "resnet": (32, (3, 32, 32))}


def maxrss_bytes():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def calibrate(fn, warmup, min_rep_s):
    """Run `warmup` calls; return how many calls make one timed loop of about min_rep_s.

    `number` comes from the fastest warm-up call, so that one preempted call does not set it."""
    est = []
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        fn()
        est.append(time.perf_counter() - t0)
    return max(1, int(min_rep_s / max(min(est), 1e-7)))


def time_loop(fn, number):
    """(wall seconds, process CPU seconds) per call over `number` calls."""
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number, (time.process_time() - c0) / number


def ops_per_step(step):
    """Dispatcher calls (ATen and custom ops, nested calls included) in one step: a count that,
    unlike times, does not depend on the load of the machine."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(1 for e in prof.events() if "::" in e.name and not e.name.startswith("autograd::"))


def saved_bytes(step_forward):
    """Bytes of the distinct storages autograd saves during one forward."""
    import torch

    seen = {}

    def pack(t):
        if t.device.type == "cpu" and t.numel() > 0:
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = step_forward()
    del out
    return sum(seen.values())


class Run:
    """One model of one library at one bit width, with its data, optimizer and training step."""

    def __init__(self, model_name, lib, bits, stats_steps):
        import torch
        import torch.nn.functional as F

        qnn = import_qnn(lib)
        _module_classes()
        torch.manual_seed(0)  # same initial weights for every library
        L = Layers(qnn, bits, stats_steps)
        self.model = (DemoCNN if model_name == "cnn" else SmallResNet)(L).train()
        batch, shape = MODEL_INPUT[model_name]
        gen = torch.Generator().manual_seed(1)
        x = torch.randn((batch,) + shape, generator=gen)
        target = torch.randint(0, 10, (batch,), generator=gen)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.forward_loss = lambda: F.cross_entropy(self.model(x), target)
        self.lib, self.stats_steps = lib, stats_steps
        self.x, self.target = x, target

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.forward_loss()
        loss.backward()
        self.opt.step()
        return loss

    def statistics_phase(self):
        """(first-step loss, median single-step seconds while activation statistics are collected,
        first two steps skipped; None for float)."""
        n = self.stats_steps if self.lib != "float" else 1
        times, loss0 = [], None
        for i in range(n):
            t0 = time.perf_counter()
            loss = self.step()
            times.append(time.perf_counter() - t0)
            if i == 0:
                loss0 = loss.item()
        return loss0, (statistics.median(times[2:]) if self.lib != "float" and n > 2 else None)


def jit_enabled(lib):
    if lib == "ours":
        from brevitas_cpp import config

        return bool(config.JIT_ENABLED)
    if lib == "brevitas":
        from brevitas import config

        return bool(config.JIT_ENABLED)
    return None


def worker_time(cfg):
    """Time every (lib, bits) of one model in this process, reps interleaved round-robin so that
    load changes on a shared machine hit all configurations alike."""
    runs, out = [], []
    for lib, bits in cfg["configs"]:
        run = Run(cfg["model"], lib, bits, cfg["stats_steps"])
        loss0, stats_s = run.statistics_phase()
        # Learned-scale phase: warm-up (also lets the TorchScript profiling executor optimize).
        number = calibrate(run.step, cfg["warmup"], cfg["min_rep_s"])
        runs.append((run, number))
        out.append(
            {
                "lib": lib,
                "bits": bits,
                "loss0": loss0,
                "stats_s": stats_s,
                "steps_per_rep": number,
                "jit_enabled": jit_enabled(lib),
                "times": [],
                "cpu_times": [],
            }
        )
    for rep in range(cfg["reps"]):
        order = list(range(len(runs)))
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for i in order:
            run, number = runs[i]
            wall, cpu = time_loop(run.step, number)
            out[i]["times"].append(wall)
            out[i]["cpu_times"].append(cpu)
    stat = min if cfg["stat"] == "min" else statistics.median
    for o, (run, _) in zip(out, runs):
        o["step_s"] = stat(o.pop("times"))
        o["cpu_s"] = stat(o.pop("cpu_times"))
        o["ops"] = ops_per_step(run.step)
    return out


def worker_memory(cfg):
    """Peak RSS growth and saved-for-backward bytes of one configuration, in a fresh process."""
    run = Run(cfg["model"], cfg["lib"], cfg["bits"], cfg["stats_steps"])
    rss0 = maxrss_bytes()
    run.statistics_phase()
    for _ in range(cfg["warmup"] + 3):
        run.step()
    rss1 = maxrss_bytes()
    return {
        "peak_rss_delta": rss1 - rss0,
        "rss_before": rss0,
        "saved": saved_bytes(run.forward_loss),
        "params": sum(p.numel() for p in run.model.parameters()),
    }


def worker_profile(cfg):
    from torch.profiler import ProfilerActivity, profile

    run = Run(cfg["model"], cfg["lib"], cfg["bits"], cfg["stats_steps"])
    run.statistics_phase()
    number = calibrate(run.step, cfg["warmup"], cfg["min_rep_s"])
    step_s = statistics.median(time_loop(run.step, number)[0] for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(cfg["profile_steps"]):
            run.step()
    for key in ("self_cpu_time_total", "cpu_time_total"):
        print(f"-- sorted by {key}, {cfg['profile_steps']} steps", file=sys.stderr)
        print(prof.key_averages().table(sort_by=key, row_limit=cfg["rows"]), file=sys.stderr)
    return {"step_s": step_s}


class CompileWatch:
    """Counts the graphs dynamo hands to the backend, and records recompile reasons and recompile
    limit hits, through wrappers of two of dynamo's internal functions (left alone if renamed)."""

    def __init__(self):
        import torch._dynamo.convert_frame as convert_frame

        self.graphs, self.reasons, self.limit_hits = 0, [], 0
        self._cf = convert_frame
        if hasattr(convert_frame, "get_and_maybe_log_recompilation_reasons"):
            orig_reasons = convert_frame.get_and_maybe_log_recompilation_reasons

            def reasons(*args, **kwargs):
                out = orig_reasons(*args, **kwargs)
                if out:
                    self.reasons.append(str(out[0]))
                return out

            convert_frame.get_and_maybe_log_recompilation_reasons = reasons
        if hasattr(convert_frame, "exceeds_recompile_limit"):
            orig_limit = convert_frame.exceeds_recompile_limit

            def limit(*args, **kwargs):
                out = orig_limit(*args, **kwargs)
                if out[0]:
                    self.limit_hits += 1
                return out

            convert_frame.exceeds_recompile_limit = limit

    def backend(self, name):
        import torch

        inner = torch._dynamo.lookup_backend(name)

        def counting_backend(gm, example_inputs):
            self.graphs += 1
            return inner(gm, example_inputs)

        return counting_backend


def isolate_forward(model, tag):
    """Give `model` its own copy of its class's forward code: dynamo caches compiled code (and
    counts recompiles against its limit) per code object, which models of one class share."""
    import types

    fn = type(model).forward
    code = fn.__code__.replace(co_name=f"forward_{tag}")
    own = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
    model.forward = types.MethodType(own, model)


def worker_compile(cfg):
    """torch.compile'd float and quant models of one model: graphs, breaks and recompiles per
    phase, then the learned-phase step timed with reps interleaved."""
    import torch
    import torch.nn.functional as F
    from torch._dynamo.utils import counters

    watch = CompileWatch()
    S = cfg["stats_steps"]
    runs, out = [], []
    plan = [("float", 32, False), ("float", 32, True)]
    plan += [(lib, bits, True) for lib, bits in cfg["configs"] if lib != "float"]
    for lib, bits, use_compile in plan:
        run = Run(cfg["model"], lib, bits, S)
        info = {"lib": lib, "bits": bits, "compiled": use_compile, "jit_enabled": jit_enabled(lib)}
        info.update(times=[], cpu_times=[])
        runs.append(run)
        out.append(info)
        if not use_compile:  # the eager float model: a reference for the compiled ones
            info["loss0"] = run.step().item()
            for _ in range(S + 1 + cfg["warmup"]):
                run.step()
            continue
        isolate_forward(run.model, f"{lib}{bits}")
        compiled = torch.compile(run.model, backend=watch.backend(cfg["backend"]))
        x, target = run.x, run.target
        run.forward_loss = lambda c=compiled, x=x, t=target: F.cross_entropy(c(x), t)
        per_step, n_reasons, limit_step = [], len(watch.reasons), None
        breaks_before = dict(counters["graph_break"])
        breaks0 = sum(breaks_before.values())
        for i in range(S + 2 + cfg["warmup"]):
            g0, h0, t0 = watch.graphs, watch.limit_hits, time.perf_counter()
            loss = run.step()
            per_step.append(watch.graphs - g0)
            if i == 0:
                info["loss0"], info["first_step_s"] = loss.item(), time.perf_counter() - t0
                info["breaks"] = sum(counters["graph_break"].values()) - breaks0
            if watch.limit_hits > h0 and limit_step is None:
                limit_step = i + 1
        info.update(
            graphs=per_step[0],
            recompiles_stats=sum(per_step[1:S]),
            recompiles_handover=sum(per_step[S : S + 2]),
            recompiles_later=sum(per_step[S + 2 :]),
            compiles_per_step=per_step,
            limit_step=limit_step,
            reasons=watch.reasons[n_reasons:],
            break_reasons=sorted(
                str(k)[:400]
                for k, v in counters["graph_break"].items()
                if v > breaks_before.get(k, 0)
            ),
        )
    numbers = [calibrate(run.step, 2, cfg["min_rep_s"]) for run in runs]
    for rep in range(cfg["reps"]):
        order = list(range(len(runs)))
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for i in order:
            wall, cpu = time_loop(runs[i].step, numbers[i])
            out[i]["times"].append(wall)
            out[i]["cpu_times"].append(cpu)
    stat = min if cfg["stat"] == "min" else statistics.median
    for o, run in zip(out, runs):
        o["step_s"] = stat(o.pop("times"))
        o["cpu_s"] = stat(o.pop("cpu_times"))
        o["ops"] = ops_per_step(run.step)
    return out


def worker(cfg):
    import torch

    torch.set_num_threads(cfg["threads"])
    return {
        "time": worker_time,
        "memory": worker_memory,
        "profile": worker_profile,
        "compile": worker_compile,
    }[cfg["mode"]](cfg)


# ----------------------------------------------------------------------------------------------
# Orchestrator: one subprocess per configuration, then the tables.
# ----------------------------------------------------------------------------------------------


def run_worker(python, cfg, jit, passthrough_stderr=False):
    """Run one worker subprocess with BREVITAS_JIT=jit; its last stdout line is its JSON result."""
    env = dict(os.environ, BREVITAS_JIT=str(jit))
    cmd = [python, os.path.abspath(__file__), "--worker", json.dumps(cfg)]
    r = subprocess.run(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=None if passthrough_stderr else subprocess.PIPE,
        text=True,
    )
    if r.returncode != 0:
        err = (r.stderr or "").strip().splitlines()
        return {"error": err[-1] if err else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.2f}"


def fmt_mb(b):
    return "-" if b is None else f"{b / 2**20:.1f}"


def pick_brevitas_python(requested):
    """(interpreter for the Brevitas runs or None, why not). No import probe (it costs seconds):
    a timing run that fails with Brevitas is redone without it."""
    if requested == "none":
        return None, "--brevitas-python none"
    if requested:
        return requested, ""
    if importlib.util.find_spec("brevitas") is not None:
        return sys.executable, ""
    if os.path.exists(DEFAULT_BREVITAS_PYTHON):
        return DEFAULT_BREVITAS_PYTHON, ""
    return None, f"brevitas is not importable here and {DEFAULT_BREVITAS_PYTHON} does not exist"


def compile_main(args, base, models, bits, jits):
    """--compile: torch.compile'd float and ours, one worker per (model, JIT), then the table."""
    print(
        f"python {sys.version.split()[0]}; torch.compile backend={args.compile_backend}; Brevitas "
        "not run in this mode"
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; threads={args.threads}, "
        f"reps={base['reps']} ({args.stat}), collect_stats_steps={base['stats_steps']}, "
        f"warm-up {base['warmup']} steps after the hand-over; torch.compile covers the model's "
        "forward (and so its backward); loss, backward call and SGD step eager\n",
        flush=True,
    )
    start = time.perf_counter()
    rows = []
    for jit in jits:
        for model in models:
            cfg = dict(
                base,
                mode="compile",
                model=model,
                backend=args.compile_backend,
                configs=[("ours", b) for b in bits],
            )
            res = run_worker(sys.executable, cfg, jit)
            if "error" in res:
                print(f"  [{model} JIT={jit}] FAILED: {res['error']}", flush=True)
                continue
            rows += [(model, jit, r) for r in res]
            print(
                f"  [{model} JIT={jit}] "
                + ", ".join(
                    f"{r['lib']}{'' if r['lib'] == 'float' else ' W%dA%d' % (r['bits'], r['bits'])}"
                    f"{'' if r['compiled'] else ' eager'} {fmt_ms(r['step_s'])} ms"
                    for r in res
                ),
                flush=True,
            )
    head = (
        f"{'model':<7} {'JIT':>3} {'config':<18} {'step ms':>8} {'cpu ms':>7} {'xfloat':>6} "
        f"{'(cpu)':>5} {'xeager':>6} {'ops/step':>8} {'graphs':>6} {'breaks':>6} "
        f"{'recompiles: stats':>17} {'hand-over':>9} {'later':>5} {'limit':>5} {'1st step s':>10} "
        f"{'loss0':>8}"
    )
    print("\n" + head)
    print("-" * len(head))
    notes = []
    for model in models:
        for jit in jits:
            sel = [r for m, j, r in rows if m == model and j == jit]
            eager = next((r for r in sel if r["lib"] == "float" and not r["compiled"]), None)
            fl = next((r for r in sel if r["lib"] == "float" and r["compiled"]), None)
            for r in sel:
                name = "float" if r["lib"] == "float" else f"{r['lib']} W{r['bits']}A{r['bits']}"
                name += " compiled" if r["compiled"] else " eager"
                if r["jit_enabled"] is not None and r["jit_enabled"] != bool(jit):
                    name += " (!)"
                xf = (r["step_s"] / fl["step_s"], r["cpu_s"] / fl["cpu_s"]) if fl else None
                xe = r["step_s"] / eager["step_s"] if eager else None
                comp = ("-",) * 7
                if r["compiled"]:
                    comp = (
                        r["graphs"],
                        r["breaks"],
                        r["recompiles_stats"],
                        r["recompiles_handover"],
                        r["recompiles_later"],
                        r["limit_step"] or "-",
                        f"{r['first_step_s']:.1f}",
                    )
                print(
                    f"{model:<7} {jit:>3} {name:<18} {fmt_ms(r['step_s']):>8} "
                    f"{fmt_ms(r['cpu_s']):>7} {'-' if xf is None else f'{xf[0]:.2f}':>6} "
                    f"{'-' if xf is None else f'{xf[1]:.2f}':>5} "
                    f"{'-' if xe is None else f'{xe:.2f}':>6} {r['ops']:>8} {comp[0]:>6} "
                    f"{comp[1]:>6} {comp[2]:>17} {comp[3]:>9} {comp[4]:>5} {comp[5]:>5} "
                    f"{comp[6]:>10} {r['loss0']:8.5f}"
                )
                if r["compiled"] and r["lib"] != "float":
                    what = f"{model} JIT={jit} {name}"
                    if r["limit_step"]:
                        verdict = (
                            f"not judged: dynamo hit its recompile limit at step "
                            f"{r['limit_step']}; the frame that hit it runs eagerly from then on"
                        )
                    else:
                        verdict = "met" if r["recompiles_handover"] <= 1 else "NOT met"
                    notes.append(
                        f"  {what}: recompiles across the hand-over {r['recompiles_handover']} "
                        f"(target <= 1: {verdict});\n    graphs compiled per step "
                        f"{r['compiles_per_step']}"
                    )
                    if r["reasons"]:
                        first = r["reasons"][0].strip().splitlines()[0].split("  #")[0]
                        notes.append(f"    first recompile reason: {first}")
                    for reason in r["break_reasons"][:3]:
                        lines = [x.strip() for x in reason.strip().splitlines() if x.strip()]
                        notes.append(f"    graph break: {' '.join(lines[:2])[:200]}")
                    if len(r["break_reasons"]) > 3:
                        notes.append(f"    ({len(r['break_reasons']) - 3} more break reasons)")
            print()
    print("\n".join(notes))
    print(
        "\n(step = wall time, cpu = process CPU time per step; xfloat = over the compiled float "
        "step, xeager = over the eager float step,\n same model and JIT setting, one process; "
        "ops/step = dispatcher calls in one step (torch.profiler; the ops inside inductor's\n "
        "kernels are not dispatcher calls); graphs = graphs compiled in the first step; breaks = "
        "graph breaks met then;\n recompiles = graphs compiled in steps 2..collect_stats_steps "
        "(stats), the two steps of the hand-over, and the\n warm-up after it (later); limit = the "
        "step at which dynamo hit its recompile limit (the frame that hit it then runs eagerly);\n 1st step s "
        "= the first step's seconds, compilation included)"
    )
    print(
        f"total time {time.perf_counter() - start:.1f} s, load average now {os.getloadavg()[0]:.2f}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="demo CNN, W8A8, fewer reps, no memory runs (< 30 s on an idle machine)",
    )
    ap.add_argument(
        "--threads", type=int, default=2, help="torch.set_num_threads in every run (default 2)"
    )
    ap.add_argument(
        "--reps", type=int, default=None, help="timed reps per configuration (default 7; quick 3)"
    )
    ap.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="statistic over reps (min is steadier on a busy machine; default median)",
    )
    ap.add_argument("--models", default=None, help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument(
        "--bits", default=None, help="comma-separated weight/activation bit widths (default 8,4)"
    )
    ap.add_argument(
        "--jit", default=None, help="BREVITAS_JIT settings to run (default 0,1; --compile 0)"
    )
    ap.add_argument(
        "--stats-steps",
        type=int,
        default=None,
        help="collect_stats_steps of the activation quantizers (default 12; quick 5)",
    )
    ap.add_argument(
        "--memory",
        choices=("on", "off"),
        default=None,
        help="fresh-process memory runs per configuration (default on; quick off)",
    )
    ap.add_argument(
        "--brevitas-python",
        default=None,
        help=f"interpreter for the runs that include Brevitas (default: this one if it imports "
        f"brevitas, else {DEFAULT_BREVITAS_PYTHON}); 'none' skips Brevitas",
    )
    ap.add_argument(
        "--profile",
        default=None,
        metavar="MODEL:LIB:BITS",
        help="instead of the tables, print torch.profiler tables of steps of one "
        "configuration (e.g. resnet:ours:8, cnn:float:32), with each --jit setting",
    )
    ap.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the float and quant models (ours; default --bits 8, --jit 0): "
        "ratios, graph breaks, recompiles across the statistics-to-learned hand-over",
    )
    ap.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend for --compile (default inductor; e.g. aot_eager)",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), or cuda: the GPU benchmark of bench_qat_step_cuda.py (ResNet-18)",
    )
    args = ap.parse_args(argv)

    if args.device != "cpu":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_qat_step_cuda

        bench_qat_step_cuda.main(["--device", args.device] + (["--quick"] if args.quick else []))
        return

    if args.worker is not None:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    models = args.models.split(",") if args.models else (["cnn"] if args.quick else list(MODELS))
    default_bits = [8] if args.quick or args.compile else [8, 4]
    bits = [int(b) for b in args.bits.split(",")] if args.bits else default_bits
    jits = [int(j) for j in (args.jit or ("0" if args.compile else "0,1")).split(",")]
    memory = (args.memory or ("off" if args.quick else "on")) == "on"
    base = {
        "threads": args.threads,
        "reps": args.reps or (3 if args.quick else 7),
        "stat": args.stat,
        "stats_steps": args.stats_steps or (5 if args.quick else 12),
        "warmup": 2 if args.quick else 5,
        "min_rep_s": 0.05 if args.quick else 0.2,
    }

    if args.compile:
        compile_main(args, base, models, bits, jits)
        return

    brev_python, brev_note = pick_brevitas_python(args.brevitas_python)

    if args.profile:
        model, lib, b = args.profile.split(":")
        python = brev_python if lib == "brevitas" else sys.executable
        for jit in jits:
            print(f"== torch.profiler, {model} {lib} {b} bit, BREVITAS_JIT={jit}", flush=True)
            cfg = dict(
                base, mode="profile", model=model, lib=lib, bits=int(b), profile_steps=5, rows=35
            )
            res = run_worker(python, cfg, jit, passthrough_stderr=True)
            print(
                f"   step {fmt_ms(res.get('step_s'))} ms (without the profiler)",
                res.get("error", ""),
            )
        return

    libs = ["float", "ours"] + (["brevitas"] if brev_python else [])
    configs = [(lib, b) for lib in libs for b in ([32] if lib == "float" else bits)]
    # The timing process must import Brevitas when it times it; that interpreter also sees torch
    # and brevitas_cpp (the reference venv is made with --system-site-packages).
    time_python = brev_python or sys.executable

    print(
        f"python {sys.version.split()[0]}; Brevitas: "
        f"{brev_python if brev_python else 'skipped, ' + brev_note}"
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a busy shared machine makes "
        f"runs noisy); threads={args.threads}, reps={base['reps']} ({args.stat}), "
        f"collect_stats_steps={base['stats_steps']}"
    )
    print(
        "times: ms per training step (zero_grad, forward, cross-entropy, backward, SGD step), the "
        "configurations of one model timed in one process with reps interleaved;\nmemory: MiB, "
        "one fresh process per configuration (peak RSS growth over the steps; saved for backward "
        "in one step)\n",
        flush=True,
    )

    start = time.perf_counter()
    results = {}  # (model, jit, lib, bits) -> dict
    for jit in jits:
        for model in models:
            res = run_worker(
                time_python, dict(base, mode="time", model=model, configs=configs), jit
            )
            if "error" in res and brev_python:
                print(
                    f"  [{model} JIT={jit}] run with Brevitas failed ({res['error']}); "
                    "Brevitas skipped from here on",
                    flush=True,
                )
                brev_python, brev_note = None, res["error"]
                configs = [(lib, b) for lib, b in configs if lib != "brevitas"]
                time_python = sys.executable
                res = run_worker(
                    time_python, dict(base, mode="time", model=model, configs=configs), jit
                )
            if "error" in res:
                print(f"  [{model} JIT={jit}] timing FAILED: {res['error']}", flush=True)
                res = [{"lib": lib, "bits": b, "error": res["error"]} for lib, b in configs]
            for r in res:
                results[(model, jit, r["lib"], r["bits"])] = r
            print(
                f"  [{model} JIT={jit}] "
                + ", ".join(
                    f"{r['lib']}{'' if r['lib'] == 'float' else ' W%dA%d' % (r['bits'], r['bits'])} "
                    f"{fmt_ms(r.get('step_s'))} ms"
                    for r in res
                ),
                flush=True,
            )
            if not memory:
                continue
            for lib, b in configs:
                python = brev_python if lib == "brevitas" else sys.executable
                mem = run_worker(
                    python, dict(base, mode="memory", model=model, lib=lib, bits=b), jit
                )
                results[(model, jit, lib, b)].update({"mem_" + k: v for k, v in mem.items()})

    print()
    head = (
        f"{'model':<7} {'JIT':>3} {'config':<16} {'step ms':>8} {'cpu ms':>7} {'stats ms':>8} "
        f"{'xfloat':>6} {'(cpu)':>5} {'brev/ours':>9} {'(cpu)':>5} {'ops/step':>8} {'peakRSS+':>8} "
        f"{'saved':>6} {'loss0':>8}"
    )
    print(head)
    print("-" * len(head))
    verdicts = []
    for model in models:
        for jit in jits:
            fl = results.get((model, jit, "float", 32), {})
            for lib, b in configs:
                r = results[(model, jit, lib, b)]
                name = "float (torch.nn)" if lib == "float" else f"{lib} W{b}A{b}"
                if "error" in r:
                    print(f"{model:<7} {jit:>3} {name:<16} FAILED: {r['error']}")
                    continue
                xf = (
                    (r["step_s"] / fl["step_s"], r["cpu_s"] / fl["cpu_s"])
                    if "step_s" in fl
                    else None
                )
                ratio = None
                ours = results.get((model, jit, "ours", b), {})
                if lib == "brevitas" and "step_s" in ours:
                    ratio = (r["step_s"] / ours["step_s"], r["cpu_s"] / ours["cpu_s"])
                if r["jit_enabled"] is not None and r["jit_enabled"] != bool(jit):
                    name += " (!)"  # the library did not take BREVITAS_JIT as asked
                print(
                    f"{model:<7} {jit:>3} {name:<16} {fmt_ms(r['step_s']):>8} {fmt_ms(r['cpu_s']):>7} "
                    f"{fmt_ms(r['stats_s']):>8} "
                    f"{'-' if xf is None else f'{xf[0]:.2f}':>6} {'-' if xf is None else f'{xf[1]:.2f}':>5} "
                    f"{'-' if ratio is None else f'{ratio[0]:.2f}':>9} "
                    f"{'-' if ratio is None else f'{ratio[1]:.2f}':>5} {r['ops']:>8} "
                    f"{fmt_mb(r.get('mem_peak_rss_delta')):>8} {fmt_mb(r.get('mem_saved')):>6} "
                    f"{r['loss0']:8.5f}"
                )
                what = f"{model} JIT={jit} W{b}A{b}"
                if lib == "ours" and xf is not None:
                    learned = LEARNED_TARGET
                    verdicts.append((what, f"QAT/float <= {learned}", xf, xf[0] <= learned))
                    if r["stats_s"] is not None:
                        sx = r["stats_s"] / fl["step_s"]
                        verdicts.append(
                            (what, f"stats/float <= {STATS_TARGET}", (sx, None), sx <= STATS_TARGET)
                        )
                    if fl.get("ops"):
                        ox = r["ops"] / fl["ops"]
                        verdicts.append(
                            (what, f"ops/float <= {OPS_TARGET}", (ox, None), ox <= OPS_TARGET)
                        )
                if lib == "brevitas" and ratio is not None:
                    met = ratio[0] >= BREVITAS_TARGET
                    note = ""
                    if not met and xf is not None and xf[0] < BREVITAS_TARGET:
                        # ours >= float here: the ratio cannot exceed Brevitas / float.
                        note = f" (at most Brevitas/float = {xf[0]:.2f} here)"
                    verdicts.append((what, f"Brevitas/ours >= {BREVITAS_TARGET}", ratio, met, note))
        print()
    print(
        "targets (judged on wall time; CPU-time ratio in brackets; stats = the statistics-phase "
        "step over float's step; ops = dispatcher calls per step over float's):"
    )
    for what, target, (wall, cpu), met, *note in verdicts:
        cpu_text = f"({cpu:.2f})" if cpu is not None else ""
        verdict = ("met" if met else "NOT met") + (note[0] if note else "")
        print(f"  {what:<24} {target:<22} {wall:6.2f} {cpu_text:<6}  {verdict}")
    print(
        "\n(step = wall time, cpu = process CPU time per step (time.process_time: steadier than wall "
        "time on a loaded machine\n with 1 thread; with more threads it adds the threads' CPU time); "
        "xfloat = step / float step, same model and JIT\n setting; brev/ours = Brevitas step / ours at "
        "the same bits; stats = median single step (wall) while the activation\n quantizers collect "
        "statistics; ops/step = dispatcher calls in one step (torch.profiler, nested included);\n "
        "loss0 = first-step loss, equal for ours and Brevitas when the models match; (!) = the library "
        "did not run\n with the BREVITAS_JIT asked for)"
    )
    print(
        f"total time {time.perf_counter() - start:.1f} s, load average now {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
