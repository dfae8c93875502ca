"""The build: how the op library was compiled and linked, and how it loads."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

import brevitas_cpp
from brevitas_cpp import _C

LIB_DIR = pathlib.Path(_C.__file__).parent
OPS_LIB = LIB_DIR / "libbrevitas_cpp_ops.so"

EXPECTED_OPS = {
    "round_ste",
    "ceil_ste",
    "floor_ste",
    "round_to_zero_ste",
    "dpu_round_ste",
    "tensor_clamp_ste",
    "scalar_clamp_ste",
    "scalar_clamp_min_ste",
    "scalar_signed_clamp_min_ste",
    "binary_sign_ste",
    "ternary_sign_ste",
    "abs_binary_sign_grad",
    "_abs_binary_sign_grad_backward",
    "int_quant",
    "_int_quant_with_mask",
    "_int_quant_backward",
    "relu_int_quant",
    "_relu_int_quant_backward",
    "abs_max_int_quant",
    "_abs_max_int_quant_backward",
    "abs_percentile_int_quant",
    "_abs_percentile_int_quant_backward",
    "learned_int_quant",
    "_learned_int_quant_backward",
    "binary_quant",
    "clamped_binary_quant",
    "_binary_quant_backward",
    "_clamped_binary_quant_backward",
    "ternary_quant",
    "_ternary_quant_backward",
    "quantization_int8",
    "_quantization_int8_backward",
    "float_quant",
    "_float_quant_backward",
}
# The statistics average over ranks: device-generic kernels (CompositeExplicitAutograd, on c10d
# collectives) plus Meta and Autograd; and its process-wide switch (no tensor arguments).
COMPOSITE_OPS = {"stats_all_reduce_mean", "_all_reduce_mean", "_all_reduce_max"}
STATE_OPS = {"_set_stats_sync", "_get_stats_sync", "_stats_stay_local"}


def test_build_info_reports_the_build():
    info = brevitas_cpp.build_info()
    assert set(info) == {
        "torch_version",
        "openmp",
        "vector_isa",
        "active_isa",
        "cuda",
        "cuda_version",
        "cuda_arch_list",
    }
    assert info["torch_version"] == torch.__version__.split("+")[0]
    # at::parallel_for is inline code: without OpenMP in our compile it would run serially.
    assert info["openmp"] is True
    assert info["active_isa"] in info["vector_isa"].split()
    # CUDA kernels are built when the torch built against has CUDA and nvcc was found
    # (cmake/BrevitasCuda.cmake): never with a CPU torch.
    if torch.version.cuda is None:
        assert info["cuda"] is False
    if info["cuda"]:
        assert info["cuda_version"].split(".")[0].isdigit() and info["cuda_arch_list"]
    else:
        assert info["cuda_version"] == "" and info["cuda_arch_list"] == ""


def test_every_op_is_registered_with_all_kernels():
    registered = {
        n.split("::")[1]
        for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("brevitas_cpp::")
    }
    assert registered == EXPECTED_OPS | COMPOSITE_OPS | STATE_OPS
    for name in EXPECTED_OPS:
        for key in ("CPU", "Meta", "Autograd", "CompositeExplicitAutograd"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"brevitas_cpp::{name}", key), (
                name,
                key,
            )
    for name in COMPOSITE_OPS:
        for key in ("CompositeExplicitAutograd", "Meta", "Autograd"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"brevitas_cpp::{name}", key), (
                name,
                key,
            )


def _needed_libraries(path: pathlib.Path) -> list[str]:
    out = subprocess.run(
        ["readelf", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [line.split("[")[1].split("]")[0] for line in out.splitlines() if "(NEEDED)" in line]


@pytest.mark.skipif(not OPS_LIB.exists(), reason="op library not beside _C")
def test_op_library_does_not_need_libpython():
    needed = _needed_libraries(OPS_LIB)
    assert any(n.startswith("libtorch") or n.startswith("libc10") for n in needed)
    assert not [n for n in needed if "python" in n], needed
    assert any("gomp" in n for n in needed), needed  # OpenMP runtime linked


_ISA_SCRIPT = """
import sys, torch, brevitas_cpp
ops = torch.ops.brevitas_cpp
g = torch.Generator().manual_seed(0)
out = {"isa": brevitas_cpp.build_info()["active_isa"]}


def reference_param_grads(x, s, z, b):
    # Autograd of the unfused composition, under this process's ATen kernels.
    s, z, b = (t.detach().requires_grad_() for t in (s, z, b))
    u = x / s + z
    r = u + (torch.round(u) - u).detach()
    hi, lo = 2 ** (b - 1) - 1, -(2 ** (b - 1))
    c = torch.where(r > hi, hi.type_as(r), r)
    c = torch.where(c < lo, lo.type_as(c), c)
    y = (c - z) * s
    return list(torch.autograd.grad(y, (s, z, b), torch.ones_like(y)))


for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    x = (torch.randn(3, 37, 5, generator=g) * 9).to(dt)
    x[0, :4, 0] = torch.tensor([2.5, -2.5, 0.5, -0.5])
    s = (torch.rand(1, 37, 1, generator=g) + 0.2).to(dt).requires_grad_()
    z = torch.zeros(1, 37, 1, dtype=dt).requires_grad_()
    b = torch.tensor(4.0, requires_grad=True)
    xr = x.clone().requires_grad_()
    for mode in ("round", "ceil", "floor", "round_to_zero", "dpu"):
        y = ops.int_quant(xr, s, z, b, True, False, mode, False)
        out[(str(dt), mode, "exact")] = [y] + list(torch.autograd.grad(y, xr, torch.ones_like(y), retain_graph=True))
        out[(str(dt), mode, "params")] = list(torch.autograd.grad(y, (s, z, b), torch.ones_like(y)))
    out[(str(dt), "round", "reference")] = reference_param_grads(x, s, z, b)
    out[(str(dt), "ste", "exact")] = [getattr(ops, n)(x) for n in
        ("round_ste", "dpu_round_ste", "round_to_zero_ste", "binary_sign_ste", "ternary_sign_ste")]
    out[(str(dt), "quant", "exact")] = [ops.binary_quant(x, s), ops.clamped_binary_quant(x, s),
                                        ops.ternary_quant(x, s, 0.5)]
torch.save(out, sys.argv[1])
"""


def _run_with_capability(cap, path):
    env = dict(os.environ)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if cap:
        env["ATEN_CPU_CAPABILITY"] = cap
    subprocess.run([sys.executable, "-P", "-c", _ISA_SCRIPT, str(path)], env=env, check=True)
    return torch.load(path)


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_every_instruction_set_gives_the_same_results(isa, tmp_path):
    """The kernels of each ISA (chosen through ATEN_CPU_CAPABILITY) give the same bits as those
    the machine picks by itself; parameter gradients (reductions, whose lane widths differ) match
    the reference composition run under the same ISA."""
    if isa.upper() not in brevitas_cpp.build_info()["vector_isa"].split():
        pytest.skip(f"{isa} kernels not compiled")
    chosen = _run_with_capability(isa, tmp_path / "chosen.pt")
    if chosen["isa"] != isa.upper():
        pytest.skip(f"this machine does not run {isa}")
    native = _run_with_capability(None, tmp_path / "native.pt")
    for key, tensors in native.items():
        if key == "isa" or key[2] != "exact":
            continue
        for a, b in zip(tensors, chosen[key]):
            assert _same_bits(a, b), key
    for dt in ("torch.float32", "torch.float64", "torch.float16", "torch.bfloat16"):
        ours = chosen[(dt, "round", "params")]
        ref = chosen[(dt, "round", "reference")]
        tol = {"torch.float32": 1e-5, "torch.float64": 1e-10}.get(dt, 1e-2)
        for i, (a, b) in enumerate(zip(ours, ref)):
            # bit_width is float32: the reference's bit-width gradient is float32 arithmetic.
            t = max(tol, 1e-5) if i == 2 else tol
            torch.testing.assert_close(a, b, rtol=t, atol=t)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return a.dtype == b.dtype and torch.equal(
        a.reshape(-1).view(as_int[a.element_size()]), b.reshape(-1).view(as_int[b.element_size()])
    )


# Symbols every shared object defines (the linker's markers, the init/fini hooks).
_LINKER_SYMBOLS = {"_edata", "_end", "__bss_start", "_init", "_fini"}


@pytest.mark.skipif(not OPS_LIB.exists(), reason="op library not beside _C")
def test_op_library_exports_only_its_own_api():
    """csrc/exports.map: no instantiation of a libstdc++, c10 or ATen template or inline function
    leaves the library, so none can stand in for the real one in another library, whatever the
    load order (the class of bug behind a SIGSEGV seen under torch 2.11 with g++ 13)."""
    out = subprocess.run(
        ["nm", "-D", "-C", "--defined-only", str(OPS_LIB)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    foreign = [n for n in names if not n.startswith("brevitas_cpp::") and n not in _LINKER_SYMBOLS]
    assert not foreign, foreign[:20]
    assert any(n.startswith("brevitas_cpp::ops::int_quant(") for n in names)


BUILD_NINJA = pathlib.Path(__file__).resolve().parents[1] / "build" / "skbuild" / "build.ninja"


@pytest.mark.skipif(
    not BUILD_NINJA.exists(), reason="no CMake build tree (scripts/setup.sh makes one)"
)
def test_portable_objects_are_linked_before_the_isa_kernels():
    """Inline code instantiated by several objects (e.g. the std::stringbuf of every error
    message) is linked once, from the first object that has it. The portable objects (schemas,
    checks, Meta/Autograd kernels) and the DEFAULT kernels come first, so the copy kept never
    holds AVX2/AVX512 instructions that a CPU without them would fault on."""
    line = next(
        line
        for line in BUILD_NINJA.read_text().splitlines()
        if line.startswith("build libbrevitas_cpp_ops.so:")
    )
    objects = [word for word in line.split() if word.endswith(".o")]
    is_isa = ["kernels_AVX" in o for o in objects]
    assert any(is_isa) and not all(is_isa), objects
    assert is_isa == sorted(is_isa), objects  # every portable object before every ISA object
