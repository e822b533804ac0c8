"""The analysis checked against real execution and against PyTorch's own kernels.

- :mod:`~aliasing.verification.oracle`: every claim of one analysis checked on real tensors;
- :mod:`~aliasing.verification.audit`: the effects audit over PyTorch's operator database
  (``python -m aliasing.verification.audit``);
- :mod:`~aliasing.verification.layout_audit`: meta and fake layouts against eager;
- :mod:`~aliasing.verification.campaign`: campaigns of work items (worker processes, shards,
  resumable results, Ray) under the audits, the soak and the precision measurement
  (``python -m aliasing.verification.campaign merge|status``).
"""
