"""The hazard catalogue (``rewrite.inductor.HAZARDS``) on its own: one row per class, each naming its check.

Fast: no compile. ``test_inductor_guard.py`` proves each row's releases against stock Inductor.
"""

from __future__ import annotations

import rewrite.inductor as adapter
from rewrite.inductor import ALL_HAZARDS, HAZARDS, STOCK_MISCOMPILES, Hazard


def test_one_row_per_hazard_in_code_order() -> None:
    assert [row.hazard for row in HAZARDS] == list(Hazard)
    assert [row.code for row in HAZARDS] == [f"H{i}" for i in range(1, 10)]
    assert ALL_HAZARDS == set(STOCK_MISCOMPILES) == {row.code for row in HAZARDS}
    assert all(STOCK_MISCOMPILES[row.code] == row.broken_on for row in HAZARDS)


def test_each_row_names_its_check_and_hook() -> None:
    for row in HAZARDS:
        assert callable(getattr(adapter, row.check)), row
        assert row.check.startswith("plan_") and row.check in adapter.__all__
        assert (row.hook == "joint_custom_pre_pass") == (row.code in ("H7", "H8")), row
        assert row.hazard.code == row.code and row.hazard.description == row.description
