"""Hypothesis profiles: `.ci/run` sets HYPOTHESIS_PROFILE=ci, so CI replays the same examples every run (a submission
never fails on a draw); local runs keep drawing new ones, with failures kept in .hypothesis/ and replayed first."""
import os
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
