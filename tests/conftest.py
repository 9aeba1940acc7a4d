"""Hypothesis profiles. The default (a plain `pytest tests`, as the README runs it, and `.ci/run`) replays the same
derandomized examples on every run and machine, so the suite passes or fails the same way everywhere: a fresh draw
never fails a submission. `HYPOTHESIS_PROFILE=explore` draws new examples on each run (failures are kept in
.hypothesis/ and replayed first): use it to hunt for bugs, then pin what it finds with `@example`."""
import os
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
