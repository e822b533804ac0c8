"""The analysis checked against real execution.

- :mod:`~aliasing.verification.oracle`: every claim of one analysis checked on real tensors.

The audits that check the analysis against PyTorch's own kernels (the effects audit over
PyTorch's operator database, the layout audit, the storage-sharing audit) and the campaigns
that run them are maintainer tools, outside the package: ``python -m tools.audit`` in a
checkout (``tools/``).
"""
