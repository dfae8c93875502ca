"""Test-wide settings. Hypothesis runs derandomized by default so that CI is reproducible: the
same examples every run. HYPOTHESIS_PROFILE=explore searches new random examples (run it
locally when changing an op; add what it finds as an explicit test)."""

import os

from hypothesis import settings

settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))
