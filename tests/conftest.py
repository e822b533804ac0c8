"""Test-suite setup: the Hypothesis profile (``HYPOTHESIS_PROFILE``, default ``ci``)."""

import os

from hypothesis import settings

from rewrite.testing.programs import register_profiles

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
