"""The one plan-then-apply pipeline and its entry points (``eliminate_clones``, ``lower_and_eliminate``)."""
