"""Any model, whole (issue 33): torchvision's, timm's and transformers' models through the
automatic quantizer (W8A8 defaults), two training steps, eval, torch.jit.script, torch.compile
(aot_eager), torch.export (each equal to eager mode, bit for bit; script is not applicable where
the float model does not script) and ONNX export checked with onnxruntime. Every leaf the
quantizer leaves in float is in zoo_models.FLOAT_TYPES, with its reason. A model whose package
is not installed is skipped.

CI runs zoo_models.FAST; ``BREVITAS_ZOO=full`` runs every model of zoo_models.MODELS, and
``python3 -P tests/export/test_zoo.py`` prints the model x stage table of the README."""

import os
import sys

import pytest

if __name__ == "__main__":  # run as a script: zoo_models sits in tests/
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo_models import (  # noqa: E402
    FAIL,
    FAST,
    MODELS,
    NOT_APPLICABLE,
    OK,
    STAGES,
    missing_packages,
    run_zoo_model,
)

ZOO = tuple(MODELS) if os.environ.get("BREVITAS_ZOO") == "full" else FAST


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_passes_every_stage(name):
    missing = missing_packages(name)
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}, not installed")
    run = run_zoo_model(name)
    failed = {stage: r.detail for stage, r in run.stages.items() if r.status == FAIL}
    assert not failed, failed
    # Not applicable only where zoo_models says why (script, for the float model's sake).
    skipped = {stage for stage, r in run.stages.items() if r.status == NOT_APPLICABLE}
    assert skipped <= ({"script"} if MODELS[name].float_does_not_script else set())
    assert tuple(run.stages) == STAGES
    assert run.replaced > 0


def print_table() -> None:
    """Every model of MODELS, every stage (not stopping at a failure), as a Markdown table."""
    print("| model | replaced | left in float | " + " | ".join(STAGES) + " |")
    print("| --- | ---: | --- | " + " | ".join("---" for _ in STAGES) + " |")
    for name in MODELS:
        missing = missing_packages(name)
        if missing:
            print(f"| {name} | skipped: {', '.join(missing)} not installed |", flush=True)
            continue
        run = run_zoo_model(name, stop_at_failure=False)
        cells = []
        for stage in STAGES:
            result = run.stages.get(stage)
            if result is None:
                cells.append("-")
            elif result.status == OK:
                detail = f", {result.detail}" if result.detail and stage == "onnx" else ""
                cells.append(f"ok ({result.seconds:.1f} s{detail})")
            else:
                cells.append(f"{result.status}: {result.detail}")
        kept = ", ".join(f"{kind} {count}" for kind, count in run.unmapped.items())
        print(f"| {name} | {run.replaced} | {kept} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    print_table()
