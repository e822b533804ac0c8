"""Every ATen overload of the installed torch, classified by how its memory effects are known.

Schemas are evidence, not proof, and the op set changes with every release
(torch 2.14 added ``shallow_copy_data_``, which gives its first argument the
storage of its second, as ``set_`` does, while its schema only says "writes
self"). This module classifies each overload registered with the dispatcher
in the ``aten`` namespace into one :data:`KINDS` entry:

``pure``
    no alias or mutation annotation and no metadata tag: the schema says it all.
``schema-out``
    every written argument is keyword-only (``out=``); resizing them is handled
    by :func:`aliasing.core.effects.metadata_written`.
``schema-inplace``
    writes exactly its first argument, tagged ``inplace`` or named as an
    in-place variant (``add_``, ``__iand__``), and the functional op it is a
    variant of exists: an in-place version of an ordinary op.
``schema-alias``
    writes nothing and declares that its results may alias its arguments: the
    analysis takes the alias as declared.
``metadata-mutating``
    changes an argument's storage, sizes or strides in place
    (:data:`aliasing.core.ops.METADATA_MUTATING`, or tagged ``inplace_view``):
    the analysis makes the value unknown.
``hidden-effects``
    has an entry in :data:`aliasing.core.ops.HIDDEN_EFFECTS`.
``reviewed``
    none of the rules above fit, and a person read the op and recorded why its
    schema is complete (:data:`aliasing.core.ops.REVIEWED`, ``PREFIX_REVIEWED``).
``unclassified``
    none of the above: the effects table treats every call as an unknown op
    (it may read, write and alias everything it reaches), and the registry
    check (``python -m tools.audit --registry``, tests/aliasing/core/test_registry.py)
    fails until the op is reviewed.

The classification of each supported torch release is committed in
``aliasing/core/registry_data/torch-<major>.<minor>.tsv``
(:func:`aliasing.core.ops.committed_path`), so what a release changed is a
readable diff, and the check compares the installed torch with it. The tables
the rules read, and the per-release data, are those of :mod:`aliasing.core.ops`.

Example
-------
>>> import torch
>>> from aliasing.core.registry import classify
>>> classify(torch.ops.aten.add_.Tensor).kind
'schema-inplace'
>>> classify(torch.ops.aten.set_.source_Tensor).kind
'metadata-mutating'
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch

from aliasing.core.ops import (
    HIDDEN_EFFECTS,
    METADATA_MUTATING,
    PREFIX_REVIEWED,
    REVIEWED,
    committed_path,
    storage_audit_path,
    storage_verdicts,
    torch_release,
)

__all__ = [
    "KINDS",
    "Classification",
    "RegistryDiff",
    "classify",
    "classify_installed",
    "committed_path",
    "compare_with_committed",
    "fresh_confirmed",
    "read_classification",
    "storage_audit_path",
    "storage_verdicts",
    "torch_release",
    "write_classification",
]

KINDS = (
    "pure",
    "schema-out",
    "schema-inplace",
    "schema-alias",
    "metadata-mutating",
    "hidden-effects",
    "reviewed",
    "unclassified",
)


class Classification(NamedTuple):
    """How one overload's memory effects are known (see the module docstring)."""

    overload: str  # "aten::add_.Tensor"
    kind: str  # one of KINDS
    reason: str


def _full_name(schema: torch._C.FunctionSchema) -> str:
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _functional_twin(name: str) -> str | None:
    """``aten::add`` for ``aten::add_``, ``aten::__and__`` for ``aten::__iand__``."""
    if name.startswith("aten::__i") and name.endswith("__"):
        return "aten::__" + name[len("aten::__i") :]
    if name.endswith("_") and not name.endswith("__"):
        return name[:-1]
    return None


def _schema_names() -> frozenset[str]:
    return frozenset(s.name for s in torch._C._jit_get_all_schemas())


_NAMES: frozenset[str] | None = None


def classify(op: torch._ops.OpOverload) -> Classification:
    """The classification of one overload (a pure function of its schema, tags and the tables).

    Parameters
    ----------
    op
        An ATen ``OpOverload`` (other namespaces are classified by the same rules).
    """
    global _NAMES
    schema = op._schema
    name = schema.name
    full = _full_name(schema)
    args = schema.arguments
    written = [a for a in args if a.alias_info is not None and a.alias_info.is_write]
    annotated = any(a.alias_info is not None for a in args) or any(r.alias_info is not None for r in schema.returns)
    tags = op.tags
    if name in METADATA_MUTATING or torch.Tag.inplace_view in tags:
        return Classification(full, "metadata-mutating", "changes an argument's storage, sizes or strides in place")
    if name in HIDDEN_EFFECTS:
        return Classification(full, "hidden-effects", HIDDEN_EFFECTS[name].evidence[:80] or "aliasing.core.ops.HIDDEN_EFFECTS")
    if not annotated:
        return Classification(full, "pure", "no alias or mutation annotation")
    if written and all(a.kwarg_only for a in written):
        return Classification(full, "schema-out", "writes only keyword-only out= arguments")
    if not written:
        return Classification(full, "schema-alias", "writes nothing; declared aliases of its arguments")
    if len(written) == 1 and written[0].name == args[0].name:
        twin = _functional_twin(name)
        if _NAMES is None:
            _NAMES = _schema_names()
        if twin is not None and twin in _NAMES:
            return Classification(full, "schema-inplace", f"in-place variant of {twin}")
    reason = REVIEWED.get(name)
    if reason is None:
        reason = next((r for prefix, r in PREFIX_REVIEWED if name.startswith(prefix)), None)
    if reason is not None:
        return Classification(full, "reviewed", reason)
    return Classification(full, "unclassified", "writes " + ", ".join(a.name for a in written) + "; not reviewed")


def _aten_overloads() -> Iterator[torch._ops.OpOverload]:
    for qualified in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, rest = qualified.partition("::")
        if namespace != "aten":
            continue
        base, _, overload = rest.partition(".")
        try:
            yield getattr(getattr(torch.ops.aten, base), overload or "default")
        except (AttributeError, RuntimeError):
            continue  # registered without a schema Python can bind


def classify_installed() -> list[Classification]:
    """Every ATen overload registered in the installed torch, classified, sorted by name."""
    return sorted((classify(op) for op in _aten_overloads()), key=lambda c: c.overload)


def fresh_confirmed(overload: str) -> bool:
    """Whether the storage-sharing audit of the installed torch ran ``overload`` (``"aten::mm"``, the
    registry's name of a default overload, or ``"aten::mm.default"``) for real and never saw a result share a storage with an argument: the only
    evidence on which the analysis takes an ATen op's undeclared results as fresh memory.

    Example
    -------
    >>> fresh_confirmed("aten::mm"), fresh_confirmed("aten::unsafe_split.Tensor")
    (True, False)
    """
    verdicts = storage_verdicts()
    verdict = verdicts.get(overload)
    if verdict is None and overload.endswith(".default"):
        verdict = verdicts.get(overload[: -len(".default")])
    return verdict == "fresh"


def write_classification(rows: list[Classification], path: Path) -> None:
    """Write rows as ``overload<TAB>kind<TAB>reason`` lines, one per overload."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# ATen overloads of torch {torch.__version__}: overload, kind, reason (aliasing.core.registry)"]
    lines += ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def read_classification(path: Path) -> list[Classification]:
    """Rows of a committed classification file."""
    rows = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            overload, kind, reason = line.split("\t", 2)
            rows.append(Classification(overload, kind, reason))
    return rows


class RegistryDiff(NamedTuple):
    """The installed torch against its committed classification."""

    release: str
    committed: bool  # a file exists for this release
    unclassified: tuple[Classification, ...]
    added: tuple[Classification, ...]  # in the installed torch, not in the file
    removed: tuple[Classification, ...]  # in the file, not in the installed torch
    changed: tuple[tuple[Classification, Classification], ...]  # (committed, installed)

    @property
    def ok(self) -> bool:
        return self.committed and not (self.unclassified or self.added or self.removed or self.changed)

    def summary(self) -> str:
        if not self.committed:
            head = f"torch {self.release}: no committed classification ({committed_path(self.release)})"
        else:
            head = (
                f"torch {self.release}: {len(self.unclassified)} unclassified, {len(self.added)} added, "
                f"{len(self.removed)} removed, {len(self.changed)} changed against {committed_path(self.release).name}"
            )
        lines = [head]
        lines += [f"  unclassified {c.overload}: {c.reason}" for c in self.unclassified]
        lines += [f"  added {c.overload}: {c.kind}" for c in self.added]
        lines += [f"  removed {c.overload}" for c in self.removed]
        lines += [f"  changed {old.overload}: {old.kind} -> {new.kind}" for old, new in self.changed]
        if not self.ok:
            lines.append(
                "  review each op, add it to a table of aliasing.core.ops (METADATA_MUTATING, REVIEWED or "
                "HIDDEN_EFFECTS), then run: python -m tools.audit --registry --write"
            )
        return "\n".join(lines)


def compare_with_committed(rows: list[Classification] | None = None, release: str | None = None) -> RegistryDiff:
    """The installed classification against the committed one of its release."""
    release = release or torch_release()
    rows = classify_installed() if rows is None else rows
    unclassified = tuple(r for r in rows if r.kind == "unclassified")
    path = committed_path(release)
    if not path.exists():
        return RegistryDiff(release, False, unclassified, (), (), ())
    old = {r.overload: r for r in read_classification(path)}
    new = {r.overload: r for r in rows}
    return RegistryDiff(
        release,
        True,
        unclassified,
        tuple(new[k] for k in sorted(new.keys() - old.keys())),
        tuple(old[k] for k in sorted(old.keys() - new.keys())),
        tuple((old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k][:2] != new[k][:2]),
    )
