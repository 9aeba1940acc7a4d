"""Hypothesis profiles, and the shared tiny fixtures of `dflash_nb.testing` as pytest fixtures.

Hypothesis: the default (a plain `pytest tests`, as the README runs it, and `.ci/run`) replays the same derandomized
examples on every run and machine, so the suite passes or fails the same way everywhere: a fresh draw never fails a
submission. `HYPOTHESIS_PROFILE=explore` draws new examples on each run (failures are kept in .hypothesis/ and
replayed first): use it to hunt for bugs, then pin what it finds with `@example`.

Fixtures: `tiny_pair` is `dflash_nb.testing.trained_pair()` (the tiny hybrid target, its 8-prompt cache, a fused and a
split drafter trained 40 steps), built once per session and shared on disk with the notebooks' tests; `tiny_cache` is
its cache alone. Both are read-only: write into pytest's `tmp_path`."""
import os
import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tiny_pair():
    "The shared trained pair (`dflash_nb.testing.trained_pair()`): target, prompts, cache, checkpoints."
    from dflash_nb.testing import trained_pair
    return trained_pair()


@pytest.fixture(scope="session")
def tiny_cache():
    "The shared tiny cache (`dflash_nb.testing.tiny_cache()`): 8 greedy responses of the tiny hybrid, taps 1..5."
    from dflash_nb.testing import tiny_cache
    return tiny_cache()
