"""A user's plain `pip install .` needs a compiler, CMake and torch, never GoogleTest: the wheel
is built here with CMake unable to find GTest (CMAKE_DISABLE_FIND_PACKAGE_GTest), installed into
a fresh directory and imported from there. Turning the C++ tests on without GoogleTest is a
configure error that names it. (One full build: a few minutes on two cores.)"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
NO_GTEST = "-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON"


def test_plain_install_needs_no_googletest(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            f"--config-settings=build-dir={tmp_path / 'build'}",
            f"--config-settings=cmake.args={NO_GTEST}",
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("brevitas_cpp-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "brevitas_cpp/libbrevitas_cpp_ops.so" in names
    assert not [n for n in names if "test" in n.rsplit("/", 1)[-1]], names
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    probe = (
        "import brevitas_cpp, torch\n"
        "assert brevitas_cpp.__file__.startswith(%r), brevitas_cpp.__file__\n"
        "x = torch.tensor([0.26, -0.74])\n"
        "y = brevitas_cpp.function.int_quant(x, torch.tensor(0.5), torch.tensor(0.0), "
        "torch.tensor(4.0), True, False)\n"
        "assert y.tolist() == [0.5, -0.5], y\n" % str(site)
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    run = subprocess.run(
        [sys.executable, "-P", "-c", probe], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake on PATH")
def test_cpp_tests_without_googletest_is_a_clear_configure_error(tmp_path):
    configure = subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO),
            "-B",
            str(tmp_path),
            "-DBREVITAS_CPP_BUILD_TESTS=ON",
            "-DBREVITAS_CPP_BUILD_PYTHON=OFF",
            NO_GTEST,
            f"-DPython_EXECUTABLE={sys.executable}",
        ],
        capture_output=True,
        text=True,
    )
    assert configure.returncode != 0
    assert "BREVITAS_CPP_BUILD_TESTS=ON needs GoogleTest" in configure.stdout + configure.stderr


def _configure(tmp_path, *args, env=None):
    return subprocess.run(
        [
            "cmake",
            "-S",
            str(REPO),
            "-B",
            str(tmp_path),
            "-DBREVITAS_CPP_BUILD_PYTHON=OFF",
            f"-DPython_EXECUTABLE={sys.executable}",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake on PATH")
def test_cuda_switch_is_checked_at_configure(tmp_path):
    """BREVITAS_CPP_CUDA accepts 0/1/ON/OFF (any case) or nothing; 1 needs a CUDA torch."""
    env = dict(os.environ, BREVITAS_CPP_CUDA="maybe")
    bad = _configure(tmp_path / "bad", env=env)
    assert bad.returncode != 0
    assert "BREVITAS_CPP_CUDA='MAYBE' is not understood" in bad.stdout + bad.stderr
    off = _configure(tmp_path / "off", env=dict(os.environ, BREVITAS_CPP_CUDA="off"))
    assert off.returncode == 0, off.stderr[-2000:]
    assert "brevitas_cpp: no CUDA kernels" in off.stdout
    if torch.version.cuda is None:
        forced = _configure(tmp_path / "forced", env=dict(os.environ, BREVITAS_CPP_CUDA="1"))
        assert forced.returncode != 0
        assert "the installed torch has no CUDA" in forced.stdout + forced.stderr
