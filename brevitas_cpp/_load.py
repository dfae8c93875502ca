"""Loads the native op library. Failing to load is an ImportError with the real reason:
there is no Python fallback that would silently compute something else."""

from __future__ import annotations

import torch  # noqa: F401  (libtorch must be loaded before the op library)

try:
    from brevitas_cpp import _C
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "brevitas_cpp could not load its native op library (brevitas_cpp._C and "
        f"libbrevitas_cpp_ops.so): {exc}. Reinstall with "
        "'pip install --no-build-isolation .' against the torch you import "
        f"(torch {torch.__version__})."
    ) from exc


def build_info() -> dict:
    """How the op library was built: torch version, OpenMP, vector ISA, CUDA."""
    return dict(_C.build_info())


def _check_torch_version() -> None:
    built = build_info()["torch_version"]
    running = torch.__version__.split("+")[0]
    if built.split("+")[0] != running:
        raise ImportError(
            f"brevitas_cpp was built against torch {built} but torch {torch.__version__} is "
            "imported; rebuild with 'pip install --no-build-isolation .'"
        )


_check_torch_version()
