"""Campaigns of many independent work items: worker processes, shards, resumable results, Ray.

The effects audit (one item per op), the soak (one item per seed's round) and the
precision measurement (one item per batch of programs) are lists of independent
*work items*, each with a stable string key. This module runs such a list once,
the same way for all three:

- **in-process** (``jobs=None``, the tools' default): items run one after the other
  in this process; an exception in one is recorded as that item's ``error``;
- **worker processes** (``jobs=N``): N processes forked from a ``forkserver`` (each
  with its own torch state; ``imports`` are imported in each before its first item,
  e.g. modules that register custom ops), each running one item at a time; an
  item still running after ``item_timeout`` seconds has its worker killed and is
  recorded as ``timeout``, an item whose worker dies (a segfault, ``os._exit``) as
  ``crash``, and a new worker takes the next item;
- **on a Ray cluster** (``ray_address=ADDRESS``): the same with
  ``ray.util.multiprocessing.Pool`` in place of the local processes (the ``ray``
  extra); a crash or a timeout restarts the pool and resubmits the items that were
  running beside it.

``shard=(k, n)`` keeps the k-th of n disjoint parts of the items (every n-th item
of the list sorted by key, from the k-th: stable in every process, never Python's
salted ``hash``). With ``results=PATH`` each outcome is appended to a JSON Lines
file as soon as it is known (and flushed); started again on the same file, a run
skips the items already recorded (*resume*). :func:`merge_results` reads the
files of several shards back, checks that they are of one campaign and cover its
items, and returns the outcomes of one run: each tool then prints the same report
from them (``--merge``, or ``python -m tools.campaign merge FILES``, which
hands the files to the tool named in their header).

An item function is a top-level function ``fn(settings, payload)`` returning
JSON-ready data; ``settings`` is the campaign's JSON settings (also written in
the results file's header, so that a resume or a merge of other settings is
refused). Values are passed through JSON in every mode, so that a report folded
from a results file equals one folded from a live run.

Examples
--------
>>> items = [WorkItem(f"n{i}", i) for i in range(5)]
>>> [item.key for item in shard(items, 1, 2)], [item.key for item in shard(items, 2, 2)]
(['n0', 'n2', 'n4'], ['n1', 'n3'])
>>> run = run_campaign(_square, items, settings={"offset": 1}, tool="doctest")
>>> [run.outcomes[item.key].value for item in items]
[1, 2, 5, 10, 17]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tools.errors import CampaignError

__all__ = [
    "STATUSES",
    "CampaignError",
    "CampaignOptions",
    "CampaignRun",
    "Outcome",
    "WorkItem",
    "add_campaign_arguments",
    "main",
    "merge_results",
    "options_from_args",
    "parse_shard",
    "run_campaign",
    "shard",
]

#: How an item ended: its function returned, raised, ran past the time limit, or its worker died.
STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "crash")
#: The header's format tag and version.
FORMAT = "fx-aliasing-campaign"
VERSION = 1
#: Seconds a new worker may take to start and import its modules.
WORKER_START_TIMEOUT = 600.0
_ERROR_LIMIT = 4000
#: The tools' modules before they moved out of the library: a results file that names one of
#: them reads as naming its new module (so that it still resumes and merges).
_RENAMED_TOOLS = {
    "aliasing.verification.audit": "tools.audit",
    "aliasing.verification.storage_audit": "tools.storage_audit",
    "rewrite.testing.soak": "tools.soak",
}

ItemFn = Callable[[dict[str, Any], Any], Any]


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """One unit of work: a stable, unique ``key`` and the JSON-ready ``payload`` its function gets."""

    key: str
    payload: Any


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one item ended (``status`` is one of :data:`STATUSES`).

    ``value`` is the item function's JSON result when ``status == "ok"``;
    ``error`` says what went wrong otherwise; ``seconds`` is the item's wall time and
    ``cpu_seconds`` the CPU time of the process that ran it (0 when it died or was killed).
    """

    key: str
    status: str
    value: Any = None
    error: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The results-file line of this outcome."""
        return {
            "key": self.key,
            "status": self.status,
            "value": self.value,
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> Outcome:
        """An outcome read back from a results file (:meth:`to_json`)."""
        return Outcome(
            str(data["key"]),
            str(data["status"]),
            data.get("value"),
            str(data.get("error", "")),
            float(data.get("seconds", 0.0)),
            float(data.get("cpu_seconds", 0.0)),
        )


@dataclasses.dataclass(frozen=True)
class CampaignOptions:
    """How to run a campaign (none of it changes an item's result).

    Attributes
    ----------
    jobs
        ``None``: in-process; N: N worker processes (or Ray actors with ``ray_address``).
    shard
        ``(k, n)``: only the k-th (1-based) of n disjoint parts of the items.
    results
        JSON Lines file written as items finish, and read back to resume.
    ray_address
        Run the workers on this Ray cluster (``ray.util.multiprocessing.Pool``).
    item_timeout
        Seconds one item may run in a worker before it is killed (``None``: no limit;
        in-process items have only the tool's own limits).
    imports
        Modules each worker imports before its first item (custom-op registrations).
    time_budget
        Seconds; once spent, no further item is started (items already running finish).
    """

    jobs: int | None = None
    shard: tuple[int, int] | None = None
    results: Path | None = None
    ray_address: str | None = None
    item_timeout: float | None = None
    imports: tuple[str, ...] = ()
    time_budget: float | None = None

    def __post_init__(self) -> None:
        if self.jobs is not None and self.jobs < 1:
            raise CampaignError(f"jobs must be at least 1, got {self.jobs}")
        if self.shard is not None:
            k, n = self.shard
            if not 1 <= k <= n:
                raise CampaignError(f"shard must be K/N with 1 <= K <= N, got {k}/{n}")
        if self.item_timeout is not None and self.item_timeout <= 0:
            raise CampaignError(f"item_timeout must be positive, got {self.item_timeout}")


@dataclasses.dataclass(frozen=True)
class CampaignRun:
    """What :func:`run_campaign` did.

    ``outcomes`` holds every recorded item of this shard (resumed ones too), by key;
    ``not_started`` the keys left when the time budget ran out; ``resumed`` how many
    outcomes came from the results file; ``wall_s`` this run's wall time.
    """

    outcomes: dict[str, Outcome]
    not_started: tuple[str, ...]
    resumed: int
    wall_s: float


# ---------------------------------------------------------------------------
# shards


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)``, with ``1 <= K <= N``.

    Examples
    --------
    >>> parse_shard("2/4")
    (2, 4)
    """
    try:
        k_text, n_text = text.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise CampaignError(f"a shard is K/N (e.g. 1/4), got {text!r}") from None
    if not 1 <= k <= n:
        raise CampaignError(f"a shard is K/N with 1 <= K <= N, got {text!r}")
    return k, n


def shard(items: Sequence[WorkItem], k: int, n: int) -> list[WorkItem]:
    """The k-th (1-based) of n disjoint parts of ``items``, in their order.

    Part k holds the items at positions ``k - 1``, ``k - 1 + n``, ... of the list
    sorted by key: the n parts cover the items, never overlap, and are the same
    in every process given the same items.

    Raises
    ------
    CampaignError
        For a bad ``k``/``n`` or repeated keys.

    Examples
    --------
    >>> items = [WorkItem(k, None) for k in "dcba"]
    >>> [i.key for i in shard(items, 1, 3)], [i.key for i in shard(items, 2, 3)], [i.key for i in shard(items, 3, 3)]
    (['d', 'a'], ['b'], ['c'])
    """
    if not 1 <= k <= n:
        raise CampaignError(f"shard must be K/N with 1 <= K <= N, got {k}/{n}")
    keys = sorted(item.key for item in items)
    if len(set(keys)) != len(keys):
        raise CampaignError("work item keys must be unique")
    mine = set(keys[k - 1 :: n])
    return [item for item in items if item.key in mine]


# ---------------------------------------------------------------------------
# results files


def _header(tool: str, settings: dict[str, Any], shard_: tuple[int, int] | None) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "tool": tool, "settings": settings, "shard": list(shard_) if shard_ else None}


def _json_ready(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _read_file(path: Path) -> tuple[dict[str, Any], list[Outcome], int]:
    """(header, outcomes, bytes of complete lines): a line cut short by a kill is left out."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode().splitlines()
    if not lines:
        raise CampaignError(f"{path}: no header (not a campaign results file)")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        raise CampaignError(f"{path}: the first line is not JSON (not a campaign results file)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CampaignError(f"{path}: not a campaign results file")
    if header.get("version") != VERSION:
        raise CampaignError(f"{path}: results format version {header.get('version')}, this version reads {VERSION}")
    tool = header.get("tool")
    header["tool"] = _RENAMED_TOOLS.get(tool, tool) if isinstance(tool, str) else tool
    outcomes = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            outcomes.append(Outcome.from_json(json.loads(line)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise CampaignError(f"{path}:{number}: not an outcome line") from None
    return header, outcomes, end


def _shown(value: Any) -> str:
    """A setting's value as JSON (``null``, ``[0, 3]``, ``"fake"``): as the results files hold it."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}/{value[1]}" if value[0] >= 1 and value[1] >= value[0] else json.dumps(value)
    return json.dumps(value, sort_keys=True)


def settings_difference(there: dict[str, Any], here: dict[str, Any]) -> str:
    """Only the settings that differ, by sorted key: ``"examples 3, not 25; max_ops 5, not 10"``
    (``there``'s value first; a setting one side lacks is ``unset``).

    Examples
    --------
    >>> settings_difference({"b": 1, "a": 2, "c": 3}, {"c": 3, "a": 2, "b": 5, "d": True})
    'b 1, not 5; d unset, not true'
    """
    missing = object()
    parts = []
    for key in sorted(set(there) | set(here)):
        a, b = there.get(key, missing), here.get(key, missing)
        if a != b:
            parts.append(f"{key} {'unset' if a is missing else json.dumps(a, sort_keys=True)}, "
                         f"not {'unset' if b is missing else json.dumps(b, sort_keys=True)}")
    return "; ".join(parts)


class _ResultsFile:
    """A results file being written: the header, then one outcome a line, each flushed."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.done: dict[str, Outcome] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size:
            found, outcomes, end = _read_file(path)
            for field in ("tool", "settings", "shard"):
                if found.get(field) != header[field]:
                    if field == "settings" and isinstance(found.get(field), dict):
                        what = f"other settings ({settings_difference(found[field], header[field])})"
                    else:
                        what = f"another {field} ({_shown(found.get(field))}, not {_shown(header[field])})"
                    raise CampaignError(
                        f"{path} holds a campaign with {what}: resume with the same settings, or write to another file"
                    )
            self.done = {o.key: o for o in outcomes}
            with path.open("r+b") as f:  # drop a line a kill cut short
                f.truncate(end)
            self._file = path.open("a")
        else:
            self._file = path.open("w")
            self._write(header)

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def append(self, outcome: Outcome) -> None:
        self._write(outcome.to_json())

    def close(self) -> None:
        self._file.close()


def merge_results(
    paths: Sequence[Path],
    *,
    tool: str,
    items: Callable[[dict[str, Any]], Sequence[WorkItem]],
    allow_missing: bool = False,
) -> tuple[dict[str, Any], dict[str, Outcome]]:
    """Read the results files of a campaign's shards back as the outcomes of one run.

    Parameters
    ----------
    paths
        Results files (one per shard, or one of a whole run).
    tool
        The campaign's tool (the files' headers must name it).
    items
        The campaign's items, given its settings (read from the headers).
    allow_missing
        Return the outcomes even if the files do not cover every item.

    Returns
    -------
    (settings, outcomes by key)

    Raises
    ------
    CampaignError
        If the files are of other tools or settings, hold an item outside their
        shard or an item twice with different outcomes, or (unless
        ``allow_missing``) miss items.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> items = [WorkItem(f"n{i}", i) for i in range(5)]
    >>> for k in (1, 2):
    ...     _ = run_campaign(_square, items, settings={"offset": 0}, tool="doctest",
    ...                      options=CampaignOptions(shard=(k, 2), results=folder / f"{k}.jsonl"))
    >>> settings, outcomes = merge_results([folder / "1.jsonl", folder / "2.jsonl"], tool="doctest",
    ...                                    items=lambda settings: items)
    >>> settings, sorted(o.value for o in outcomes.values())
    ({'offset': 0}, [0, 1, 4, 9, 16])
    """
    if not paths:
        raise CampaignError("no results files to merge")
    settings: dict[str, Any] | None = None
    outcomes: dict[str, Outcome] = {}
    shards: list[tuple[Path, tuple[int, int] | None, list[Outcome]]] = []
    for path in paths:
        header, found, _ = _read_file(Path(path))
        if header["tool"] != tool:
            raise CampaignError(f"{path} is a {header['tool']} campaign, not {tool}")
        if settings is None:
            settings = header["settings"]
        elif header["settings"] != settings:
            raise CampaignError(
                f"{path} was run with other settings than {paths[0]}: {settings_difference(header['settings'], settings)}"
            )
        part = (int(header["shard"][0]), int(header["shard"][1])) if header["shard"] else None
        shards.append((Path(path), part, found))
    assert settings is not None
    every = list(items(settings))
    for path, part, found in shards:
        allowed = {i.key for i in (shard(every, *part) if part else every)}
        for o in found:
            if o.key not in allowed:
                raise CampaignError(f"{path}: item {o.key!r} is not an item of its shard {part} of this campaign")
            known = outcomes.get(o.key)
            if known is not None and known != dataclasses.replace(o, seconds=known.seconds, cpu_seconds=known.cpu_seconds):
                raise CampaignError(f"{path}: item {o.key!r} recorded twice with different outcomes")
            outcomes[o.key] = o
    missing = {i.key for i in every if i.key not in outcomes}
    if missing and not allow_missing:
        raise CampaignError(_missing_message(every, missing, shards))
    return settings, {i.key: outcomes[i.key] for i in every if i.key in outcomes}


def _missing_message(
    every: Sequence[WorkItem], missing: set[str], shards: Sequence[tuple[Path, tuple[int, int] | None, list[Outcome]]]
) -> str:
    """What the results files of a merge lack, in one line: the shards not given or not finished
    (``shard 3/3 missing``, ``shard 2/3 incomplete: 4 of 7 items``), or the unfinished run."""
    splits = {part[1] for _, part, _ in shards if part is not None}
    hint = " (--allow-missing reports the others)"
    if len(splits) == 1 and all(part is not None for _, part, _ in shards):
        n = splits.pop()
        given = {part for _, part, _ in shards}
        parts = []
        for k in range(1, n + 1):
            keys = {i.key for i in shard(every, k, n)}
            lacking = keys & missing
            if not lacking:
                continue
            if (k, n) in given:
                parts.append(f"shard {k}/{n} incomplete: {len(keys) - len(lacking)} of {len(keys)} items (resume it)")
            else:
                parts.append(f"shard {k}/{n} missing")
        if parts:
            return "; ".join(parts) + hint
    if all(part is None for _, part, _ in shards):
        return f"the run is incomplete: {len(every) - len(missing)} of {len(every)} items recorded (resume it){hint}"
    return f"the results files miss {len(missing)} of {len(every)} items: a shard not given or not finished{hint}"


# ---------------------------------------------------------------------------
# running one item


def _error_text(err: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(err), err)).strip()
    where = traceback.extract_tb(err.__traceback__)[-1:] if err.__traceback__ else []
    if where:
        text += f" (at {where[0].filename}:{where[0].lineno})"
    return text[:_ERROR_LIMIT]


def _call_item(fn: ItemFn, settings: dict[str, Any], key: str, payload: Any) -> dict[str, Any]:
    """Run one item; its outcome as JSON (the function's exceptions are the item's ``error``)."""
    start, cpu = time.monotonic(), time.process_time()
    try:
        value = _json_ready(fn(settings, payload))
        status, error = "ok", ""
    except Exception as err:  # the item's failure, not the campaign's
        value, status, error = None, "error", _error_text(err)
    return Outcome(key, status, value, error, time.monotonic() - start, time.process_time() - cpu).to_json()


def _import_modules(modules: Sequence[str]) -> None:
    for name in modules:
        importlib.import_module(name)


def _worker_loop(conn: multiprocessing.connection.Connection, fn: ItemFn, settings: dict[str, Any], imports: tuple[str, ...]) -> None:
    """A local worker process: import the modules, then run the items sent until ``None``.

    A worker leaves quietly (no traceback on the terminal the campaign shared) when the
    campaign's process is gone: it ends, is killed, or closes the pipe. Ctrl-C is the
    campaign's to handle (it stops the workers), SIGTERM ends a worker at once.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    _exit_with_parent()
    try:
        try:
            _import_modules(imports)
        except BaseException as err:
            conn.send(("init-failed", _error_text(err)))
            return
        conn.send(("ready", None))
        while True:
            message = conn.recv()
            if message is None:
                return
            key, payload = message
            conn.send(("done", _call_item(fn, settings, key, payload)))
    except (EOFError, OSError):  # the campaign's end of the pipe is closed: it is gone
        os._exit(0)


def _exit_with_parent() -> None:
    """Leave this worker at once when the process that started it dies (SIGTERM, SIGKILL...),
    rather than finishing an item nobody will read and failing on the pipe."""
    parent = multiprocessing.parent_process()
    sentinel = getattr(parent, "sentinel", None)
    if sentinel is None:
        return

    def watch() -> None:
        with contextlib.suppress(OSError, ValueError):
            multiprocessing.connection.wait([sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="fx-aliasing-campaign-watchdog", daemon=True).start()


def _importable(fn: ItemFn) -> ItemFn:
    """``fn`` itself, or, for a function of a module run as ``python -m``, the same function
    imported under the module's real name (so that workers find it)."""
    if getattr(fn, "__module__", None) != "__main__":
        return fn
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None or not spec.name:
        return fn
    found: ItemFn = getattr(importlib.import_module(spec.name), fn.__qualname__)
    return found


# ---------------------------------------------------------------------------
# executors: in-process, local processes, Ray


@dataclasses.dataclass
class _Task:
    item: WorkItem
    started: float = 0.0  # when its clock started (0: not yet)


class _Executor:
    """Runs items; ``wait`` returns those that finished (with their outcome JSON), ``resubmit``
    the tasks that a restart stopped before they finished (to run again)."""

    slots = 1

    def __init__(self) -> None:
        self.resubmit: list[_Task] = []

    def submit(self, task: _Task) -> None:
        raise NotImplementedError

    def running(self) -> list[_Task]:
        raise NotImplementedError

    def wait(self, timeout: float) -> list[tuple[_Task, dict[str, Any]]]:
        raise NotImplementedError

    def kill(self, task: _Task) -> list[_Task]:
        """Stop ``task`` (past its time limit); return other tasks to submit again."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop every worker."""


class _InProcess(_Executor):
    def __init__(self, fn: ItemFn, settings: dict[str, Any]) -> None:
        super().__init__()
        self.fn, self.settings = fn, settings
        self.task: _Task | None = None

    def submit(self, task: _Task) -> None:
        self.task = task

    def running(self) -> list[_Task]:
        return [self.task] if self.task else []

    def wait(self, timeout: float) -> list[tuple[_Task, dict[str, Any]]]:
        task, self.task = self.task, None
        if task is None:
            return []
        return [(task, _call_item(self.fn, self.settings, task.item.key, task.item.payload))]

    def kill(self, task: _Task) -> list[_Task]:  # pragma: no cover - an in-process item has no clock
        return []


@dataclasses.dataclass
class _Worker:
    process: Any  # multiprocessing.context.SpawnProcess
    conn: multiprocessing.connection.Connection
    started_at: float
    ready: bool = False
    task: _Task | None = None


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):
            return f"worker process killed by {signal.Signals(-exitcode).name}"
    return f"worker process died (exit code {exitcode})"


def _process_context(fn: ItemFn, imports: tuple[str, ...]) -> Any:
    """``forkserver`` (where there is one) with ``fn``'s module and ``imports`` preloaded: the
    server imports torch and the modules once (those of the first campaign of this process),
    and each worker is a fork of it, never of this process (whose OpenMP and other threads a
    fork would not carry); ``spawn`` elsewhere. Each worker imports the modules again in any
    case (a no-op after the preload).

    When ``fn``'s module is this process's ``__main__`` (``python -m tools.soak``), each worker
    runs that module again as ``__mp_main__`` before its first item (multiprocessing does, to
    unpickle what ``__main__`` defines), and runpy warns if the module is imported already: the
    server then preloads the modules it imports, not the module itself."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    main = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    own = [fn.__module__] if fn.__module__ != main else _imported_by(fn.__module__)
    context.set_forkserver_preload(list(dict.fromkeys(["torch", "tools.campaign", *own, *imports])))
    return context


def _imported_by(name: str) -> list[str]:
    """The modules that module ``name``'s top-level names come from (modules it imports, and the
    modules of the functions and classes it imports), ``name`` and the interpreter's own left out."""
    module = sys.modules.get(name)
    found: list[str] = []
    for value in vars(module).values() if module is not None else ():
        source = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if not isinstance(source, str) or source == name or source.startswith("_") or source == "builtins":
            continue
        if source in sys.modules and source not in found:
            found.append(source)
    return found


class _LocalProcesses(_Executor):
    """``jobs`` worker processes, each one item at a time; a dead or killed one is replaced."""

    def __init__(self, jobs: int, fn: ItemFn, settings: dict[str, Any], imports: tuple[str, ...]) -> None:
        super().__init__()
        self.slots = jobs
        self.fn, self.settings, self.imports = fn, settings, imports
        self.context = _process_context(fn, imports)
        self.workers: list[_Worker] = []

    def _start(self) -> _Worker:
        ours, theirs = self.context.Pipe()
        process = self.context.Process(
            target=_worker_loop, args=(theirs, self.fn, self.settings, self.imports), daemon=True, name="fx-aliasing-campaign"
        )
        process.start()
        theirs.close()
        worker = _Worker(process, ours, time.monotonic())
        self.workers.append(worker)
        return worker

    def submit(self, task: _Task) -> None:
        idle = [w for w in self.workers if w.task is None]
        worker = idle[0] if idle else self._start()
        worker.task = task
        task.started = time.monotonic() if worker.ready else 0.0
        worker.conn.send((task.item.key, task.item.payload))

    def running(self) -> list[_Task]:
        return [w.task for w in self.workers if w.task is not None]

    def _retire(self, worker: _Worker) -> None:
        with contextlib.suppress(Exception):
            worker.conn.close()
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(5)
        self.workers.remove(worker)

    def wait(self, timeout: float) -> list[tuple[_Task, dict[str, Any]]]:
        busy = [w for w in self.workers if w.task is not None]
        if not busy:
            return []
        for w in busy:  # a worker that cannot start must not hang the campaign
            if not w.ready and time.monotonic() - w.started_at > WORKER_START_TIMEOUT:
                raise CampaignError(f"a worker process did not start within {WORKER_START_TIMEOUT:.0f} s")
        multiprocessing.connection.wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
        finished: list[tuple[_Task, dict[str, Any]]] = []
        for w in busy:
            task = w.task
            assert task is not None
            dead = False
            try:
                while w.conn.poll():
                    kind, data = w.conn.recv()
                    if kind == "init-failed":
                        raise CampaignError(f"a worker process could not import its modules: {data}")
                    if kind == "ready":
                        w.ready = True
                        task.started = time.monotonic()
                    elif kind == "done":
                        w.task = None
                        finished.append((task, data))
                        break
            except (EOFError, OSError):
                dead = True
            if w.task is not None and (dead or not w.process.is_alive()):
                w.process.join(5)
                error = _death(w.process.exitcode)
                self._retire(w)
                finished.append((task, Outcome(task.item.key, "crash", None, error, time.monotonic() - (task.started or w.started_at)).to_json()))
        return finished

    def kill(self, task: _Task) -> list[_Task]:
        for w in list(self.workers):
            if w.task is task:
                self._retire(w)
        return []

    def close(self) -> None:
        for w in list(self.workers):
            if w.task is None:
                with contextlib.suppress(Exception):
                    w.conn.send(None)
            else:  # an item still running (the campaign was stopped): nobody will read its outcome
                self._retire(w)
        deadline = time.monotonic() + 10
        for w in list(self.workers):
            w.process.join(max(0.0, deadline - time.monotonic()))
            self._retire(w)


def _first_line(err: BaseException) -> str:
    """``Type: first line of the message`` (Ray's errors run to many lines)."""
    text = str(err)
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"


class _RayPool(_Executor):
    """``ray.util.multiprocessing.Pool`` on a cluster: ``jobs`` actors, at most ``jobs`` items
    submitted at a time; a crash or a timeout restarts the pool (its actors cannot be killed
    one by one through the pool's interface) and the other running items start again."""

    def __init__(self, address: str, jobs: int, fn: ItemFn, settings: dict[str, Any], imports: tuple[str, ...]) -> None:
        try:  # (imported by name: Ray is an optional extra, without type information here)
            pool_class: Any = importlib.import_module("ray.util.multiprocessing").Pool
            ray: Any = importlib.import_module("ray")
        except ImportError as err:
            raise CampaignError("--ray needs Ray: pip install 'fx-aliasing[ray]'") from err

        super().__init__()
        self.ray = ray
        self.started_ray = not ray.is_initialized()
        self.slots = jobs
        self.fn, self.settings, self.imports = fn, settings, imports
        self.address = address
        self.make_pool: Callable[[], Any] = lambda: pool_class(
            processes=jobs, initializer=_import_modules, initargs=(imports,), ray_address=address
        )
        try:
            self.pool: Any = self.make_pool()
        except Exception as err:
            raise CampaignError(f"cannot start a Ray pool of {jobs} on {address}: {type(err).__name__}: {err}") from err
        self.handles: dict[int, tuple[_Task, Any]] = {}

    def submit(self, task: _Task) -> None:
        task.started = time.monotonic()
        handle = self.pool.apply_async(_call_item, (self.fn, self.settings, task.item.key, task.item.payload))
        self.handles[id(task)] = (task, handle)

    def running(self) -> list[_Task]:
        return [task for task, _ in self.handles.values()]

    def _restart(self, keep: _Task | None) -> list[_Task]:
        """A new pool; the tasks that were running (but ``keep``) to submit again."""
        again = [task for task, _ in self.handles.values() if task is not keep]
        self.handles.clear()
        with contextlib.suppress(Exception):
            self.pool.terminate()
        self.pool = self._new_pool()
        return again

    def _new_pool(self, attempts: int = 3) -> Any:
        """A pool to replace one a crash or a timeout ended. Its actors can die while they start
        (the cluster is still reaping the old ones): each such failure waits a moment and tries
        again, ``attempts`` times in all, then raises :class:`CampaignError` naming the cause."""
        for attempt in range(attempts):
            try:
                return self.make_pool()
            except Exception as err:
                if attempt == attempts - 1:
                    raise CampaignError(
                        f"cannot restart the Ray pool of {self.slots} on {self.address} "
                        f"({attempts} tries): {_first_line(err)}"
                    ) from err
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def wait(self, timeout: float) -> list[tuple[_Task, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while True:
            finished: list[tuple[_Task, dict[str, Any]]] = []
            for ident, (task, handle) in list(self.handles.items()):
                if not handle.ready():
                    continue
                del self.handles[ident]
                try:
                    finished.append((task, handle.get(0)))
                except Exception as err:  # the actor died under the item
                    error = f"worker died: {_first_line(err)}"
                    finished.append((task, Outcome(task.item.key, "crash", None, error[:_ERROR_LIMIT], time.monotonic() - task.started).to_json()))
                    self.resubmit = self._restart(None)
                    return finished
            if finished or time.monotonic() >= deadline:
                return finished
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def kill(self, task: _Task) -> list[_Task]:
        return self._restart(task)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pool.terminate()
        if self.started_ray:
            self.ray.shutdown()


# ---------------------------------------------------------------------------
# the engine


def run_campaign(
    fn: ItemFn,
    items: Iterable[WorkItem],
    *,
    settings: dict[str, Any],
    tool: str,
    options: CampaignOptions | None = None,
    progress: Callable[[Outcome, int, int | None], None] | None = None,
) -> CampaignRun:
    """Run ``fn(settings, item.payload)`` for every item (of the shard), as ``options`` say.

    Parameters
    ----------
    fn
        A top-level function (workers import it by name) returning JSON-ready data.
    items
        The work items. With a ``shard`` they must be a finite sequence; without one
        they may be an endless iterator (e.g. soak seeds under a ``time_budget``).
    settings
        JSON-ready settings, passed to ``fn`` and written in the results header.
    tool
        The tool's module (``"tools.audit"``): named in the header, for the merge.
    options
        Jobs, shard, results file, Ray address, time limit, imports, time budget.
    progress
        Called after each new outcome with (outcome, outcomes so far, items or ``None``).

    Returns
    -------
    CampaignRun

    Raises
    ------
    CampaignError
        For a results file of another campaign, or a worker that cannot start.

    Examples
    --------
    >>> run = run_campaign(_square, [WorkItem("a", 3), WorkItem("b", "x")], settings={"offset": 0}, tool="doctest")
    >>> run.outcomes["a"].value, run.outcomes["b"].status
    (9, 'error')
    """
    options = options or CampaignOptions()
    settings = _json_ready(settings)
    start = time.monotonic()
    if options.shard is not None:
        items = shard(list(items), *options.shard)
    total = len(items) if isinstance(items, Sequence) else None
    results = _ResultsFile(options.results, _header(tool, settings, options.shard)) if options.results else None
    done: dict[str, Outcome] = dict(results.done) if results else {}
    resumed = len(done)
    pending = (item for item in items if item.key not in done)
    executor = _executor(_importable(fn), settings, options)
    not_started: list[str] = []

    def record(outcome: Outcome) -> None:
        done[outcome.key] = outcome
        if results is not None:
            results.append(outcome)
        if progress is not None:
            progress(outcome, len(done), total)

    def next_new_task() -> _Task | None:
        for item in pending:
            if options.time_budget is not None and time.monotonic() - start >= options.time_budget:
                not_started.append(item.key)
                if total is not None:  # (an endless iterator is left as it is)
                    not_started.extend(i.key for i in pending)
                return None
            return _Task(item)
        return None

    try:
        with _terminated_as_exit():
            _drive(executor, next_new_task, record, options.item_timeout)
    finally:
        executor.close()
        if results is not None:
            results.close()
    return CampaignRun(done, tuple(not_started), resumed, time.monotonic() - start)


@contextlib.contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """SIGTERM raises ``SystemExit(143)`` in the block (main thread, default handler only), so
    that the campaign stops its workers and closes its results file before it exits quietly."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _executor(fn: ItemFn, settings: dict[str, Any], options: CampaignOptions) -> _Executor:
    """The executor ``options`` ask for: a Ray pool, this process (its imports made here), or local workers."""
    if options.ray_address is not None:
        return _RayPool(options.ray_address, options.jobs or 1, fn, settings, options.imports)
    if options.jobs is None:
        executor = _InProcess(fn, settings)
        _import_modules(options.imports)
        return executor
    return _LocalProcesses(options.jobs, fn, settings, options.imports)


def _drive(
    executor: _Executor,
    next_new_task: Callable[[], _Task | None],
    record: Callable[[Outcome], None],
    limit: float | None,
) -> None:
    """Keep ``executor``'s slots full until no task is left, recording each outcome.

    Tasks that a restart, or the kill of a task past ``limit`` seconds, stopped before they
    finished run again first; then new ones (``next_new_task``: None once there are no more).
    """
    again: deque[_Task] = deque()
    exhausted = False
    while True:
        while not exhausted and len(executor.running()) < executor.slots:
            task = again.popleft() if again else next_new_task()
            if task is None:
                exhausted = True
                break
            executor.submit(task)
        running = executor.running()
        if not running:
            break
        now = time.monotonic()
        clocks = [t.started + limit - now for t in running if limit is not None and t.started]
        wait = max(0.0, min(clocks)) if clocks else 1.0
        for _task, data in executor.wait(min(wait, 1.0)):
            record(Outcome.from_json(data))
        if executor.resubmit:
            again.extend(executor.resubmit)
            executor.resubmit = []
            exhausted = False
        if limit is not None:
            for task in executor.running():
                if task.started and time.monotonic() - task.started > limit:
                    again.extend(executor.kill(task))
                    exhausted = False
                    record(Outcome(task.item.key, "timeout", None, f"over the item time limit of {limit:g} s", time.monotonic() - task.started))


def _square(settings: dict[str, Any], payload: Any) -> Any:
    """The doctests' item function: ``payload ** 2 + offset``."""
    return payload**2 + settings["offset"]


# ---------------------------------------------------------------------------
# command lines


def add_campaign_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every campaign tool takes: ``--jobs``, ``--shard``, ``--results``, ``--ray``,
    ``--item-timeout``, ``--import`` and ``--merge`` (read with :func:`options_from_args`)."""
    group = parser.add_argument_group("campaign (tools.campaign)")
    group.add_argument("--jobs", type=int, default=None, metavar="N", help="run the items in N worker processes (default: in this process)")
    group.add_argument("--shard", type=parse_shard, default=None, metavar="K/N", help="run only the K-th of N disjoint parts of the items")
    group.add_argument("--results", type=Path, default=None, metavar="PATH", help="append each item's outcome to this JSON Lines file; resume from it")
    group.add_argument("--ray", default=None, metavar="ADDRESS", help="run the workers on this Ray cluster (needs the ray extra)")
    group.add_argument("--item-timeout", type=float, default=None, metavar="S", help="kill a worker whose item runs over S seconds")
    group.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help="import MODULE here and in every worker first (custom ops)")
    group.add_argument("--merge", nargs="+", type=Path, default=None, metavar="RESULTS", help="print the report of these results files (shards) instead of running")
    group.add_argument("--allow-missing", action="store_true", help="with --merge: report even if the files miss items")


def options_from_args(args: argparse.Namespace, *, time_budget: float | None = None) -> CampaignOptions:
    """The :class:`CampaignOptions` of parsed :func:`add_campaign_arguments` options."""
    jobs = args.jobs if args.jobs is not None or args.ray is None else 1
    return CampaignOptions(
        jobs=jobs,
        shard=args.shard,
        results=args.results,
        ray_address=args.ray,
        item_timeout=args.item_timeout,
        imports=tuple(args.imports),
        time_budget=time_budget,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.campaign merge RESULTS... [-- TOOL OPTIONS]``: the report of a campaign's
    results files, printed by the tool their header names (``python -m TOOL --merge RESULTS...``);
    ``python -m tools.campaign status RESULTS...``: items recorded per file and status.

    Examples
    --------
    >>> main(["status", "/nonexistent.jsonl"])
    Traceback (most recent call last):
    ...
    tools.errors.CampaignError: /nonexistent.jsonl: no such results file
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m tools.campaign", description="Merge or inspect campaign results files.")
    parser.add_argument("command", choices=("merge", "status"))
    parser.add_argument("results", nargs="+", type=Path)
    args = parser.parse_args(argv)
    headers = []
    for path in args.results:
        if not path.exists():
            raise CampaignError(f"{path}: no such results file")
        headers.append(_read_file(path))
    if args.command == "status":
        for path, (header, outcomes, _) in zip(args.results, headers):
            counts = {s: sum(o.status == s for o in outcomes) for s in STATUSES}
            part = "/".join(map(str, header["shard"])) if header["shard"] else "all"
            print(f"{path}: {header['tool']}, shard {part}, {len(outcomes)} items: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        return 0
    tools = {h["tool"] for h, _, _ in headers}
    if len(tools) != 1:
        raise CampaignError(f"the files are of several tools: {sorted(tools)}")
    tool_main: Callable[[list[str]], int] = importlib.import_module(tools.pop()).main
    return tool_main(["--merge", *map(str, args.results), *rest])


def _cli() -> int:
    """``python -m tools.campaign``: :func:`main`, a :class:`CampaignError` as one line (exit 2)."""
    try:
        return main()
    except CampaignError as err:
        print(f"python -m tools.campaign: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_cli())
