"""The maintainers' workshop: the tools that check, measure and regenerate fx-aliasing.

Not part of the wheel (only :mod:`aliasing` and :mod:`rewrite` ship); run from a checkout,
beside ``benchmarks/``. They import the library; the library never imports them
(``tests/project/test_layering.py`` checks it).

- :mod:`tools.audit`: the effects audit over PyTorch's operator database
  (``python -m tools.audit``; ``--registry`` the operator-registry check, ``--layouts``
  the layout audit, ``--storage`` the storage-sharing audit);
- :mod:`tools.layout_audit`: meta and fake result layouts against eager; it generates
  ``aliasing/core/registry_data/layout-divergences.json``, the table
  :mod:`aliasing.core.layout_divergences` reads;
- :mod:`tools.storage_audit`: does a result of a ``pure`` overload share an argument's
  storage; it generates ``aliasing/core/registry_data/storage-*.tsv``;
- :mod:`tools.campaign`: campaigns of work items (worker processes, shards, resumable
  results, Ray) under the audits, the soak and the precision measurement
  (``python -m tools.campaign merge|status``);
- :mod:`tools.time_limit`: the audits' per-sample time limit;
- :mod:`tools.soak`: long fuzzing campaigns of the clone-elimination pass
  (``python -m tools.soak``);
- :mod:`tools.precision`: the greedy dynamic oracle and the precision of a pass against it;
- :mod:`tools.broken`: deliberately broken clone-elimination passes (unsound), to prove the
  fuzzer catches them and as the benchmarks' output-only baseline;
- :mod:`tools.errors`: their exceptions (part of :class:`aliasing.AliasingError`'s hierarchy).
"""
