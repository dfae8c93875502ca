"""The notebooks run headless, top to bottom, on a fresh kernel (their own asserts check what their
text claims). Each runs in an empty temporary working directory, with the kernel's IPython,
matplotlib and Jupyter state directories and TMPDIR pointed into the test's temporary directory,
so executing them writes nothing elsewhere; the test checks that the working directory is still
empty (the notebooks clean up after themselves) and that notebooks/ is unchanged."""

import os
import pathlib
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

import brevitas_cpp  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# Per cell. Both notebooks together take about 45 s on a busy 2-core machine (load average 10),
# about 15 s of CPU for the kernels.
CELL_TIMEOUT_S = 120


def _kernel_env(tmp_path: pathlib.Path) -> dict:
    env = dict(os.environ)
    # The kernel imports the brevitas_cpp this test imported (source tree or installed package).
    package_parent = str(pathlib.Path(brevitas_cpp.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    for var, sub in (
        ("IPYTHONDIR", "ipython"),
        ("MPLCONFIGDIR", "matplotlib"),
        ("JUPYTER_RUNTIME_DIR", "jupyter_runtime"),
        ("TMPDIR", "tmp"),
    ):
        (tmp_path / sub).mkdir()
        env[var] = str(tmp_path / sub)
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    # The notebooks show the default mode (their TorchScript export needs it, see
    # tests/nn/test_torchscript.py), whatever mode this test process runs in.
    env["BREVITAS_JIT"] = "0"
    return env


def _tree_snapshot(root: pathlib.Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in (root / "notebooks").rglob("*")}


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01_quant_layers.ipynb",
        "02_qat_and_export.ipynb",
        "03_automatic_quantization.ipynb",
        "04_export.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: pathlib.Path):
    # Stored clean: small diffs, and what a reader sees comes from running this tree.
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path: pathlib.Path, tmp_path: pathlib.Path):
    notebook = nbformat.read(path, as_version=4)
    work = tmp_path / "work"
    work.mkdir()
    before = _tree_snapshot(REPO)
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    start = time.monotonic()
    client.execute(env=_kernel_env(tmp_path))
    elapsed = time.monotonic() - start
    errors = [
        out
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors
    # Plots were drawn (inline PNGs), not silently skipped.
    images = [
        out
        for cell in notebook.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]
    assert len(images) >= 2, f"{path.name}: expected plots, got {len(images)}"
    assert _tree_snapshot(REPO) == before, "executing the notebook changed notebooks/"
    assert not list(work.iterdir()), f"{path.name} left files in its working directory"
    print(f"{path.name}: {elapsed:.1f} s")
