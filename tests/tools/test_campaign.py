"""Campaigns (tools.campaign): shards, worker processes, resume, merge, failures, Ray.

The audit and the soak give the same totals in one process, in worker processes,
in shards merged back, after a kill and a resume, and on a Ray cluster started here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aliasing.errors import AliasingError
from tools import audit as audit_module
from tools import campaign, soak
from tools.campaign import CampaignError, CampaignOptions, WorkItem, merge_results, run_campaign, shard

ROOT = Path(__file__).resolve().parents[2]
AUDIT_SLICE = ["--ops", "add", "mul", "--max-samples", "2", "--no-export", "--quiet"]
SOAK_SLICE = ["--seeds", "0..3", "--examples", "3", "--max-ops", "5"]


# ---------------------------------------------------------------------------- shards


def test_shards_are_a_disjoint_cover() -> None:
    items = [WorkItem(f"item-{i}", i) for i in (5, 3, 11, 0, 8, 1, 2, 13, 7, 4, 9, 6, 10, 12, 14, 15, 16)]
    for n in range(1, 6):
        parts = [shard(items, k, n) for k in range(1, n + 1)]
        keys = [item.key for part in parts for item in part]
        assert sorted(keys) == sorted(i.key for i in items) and len(keys) == len(set(keys)), n
        assert max(map(len, parts)) - min(map(len, parts)) <= 1, n  # balanced
        for part in parts:  # each part keeps the items' order
            assert [i.key for i in part] == [i.key for i in items if i in part]


@pytest.mark.integration  # worker processes
def test_shards_are_the_same_in_another_process() -> None:
    code = (
        "from tools.campaign import WorkItem, shard; "
        "print([i.key for i in shard([WorkItem(f'k{i}', i) for i in range(30)], 2, 3)])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True, cwd=ROOT)
    here = [i.key for i in shard([WorkItem(f"k{i}", i) for i in range(30)], 2, 3)]
    assert out.stdout.strip() == str(here)


def test_bad_shards_and_repeated_keys_raise() -> None:
    assert campaign.parse_shard("3/4") == (3, 4)
    for text in ("0/4", "5/4", "1-4", "a/b"):
        with pytest.raises(CampaignError):
            campaign.parse_shard(text)
    with pytest.raises(CampaignError, match="unique"):
        shard([WorkItem("a", 1), WorkItem("a", 2)], 1, 2)
    assert isinstance(CampaignError("x"), AliasingError)


# ---------------------------------------------------------------------------- failures of items


def misbehave(settings: dict[str, Any], payload: str) -> str:
    """Item function of the tests below: returns, raises, exits, segfaults or hangs."""
    if payload == "raise":
        raise RuntimeError("the item raised")
    if payload == "exit":
        os._exit(3)
    if payload == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if payload == "hang":
        time.sleep(600)
    return payload.upper()


@pytest.mark.integration  # worker processes
def test_crashing_and_hanging_items_are_recorded_and_the_run_completes(tmp_path: Path) -> None:
    names = ["a", "raise", "b", "exit", "hang", "segfault", "c", "d"]
    results = tmp_path / "r.jsonl"
    start = time.monotonic()
    run = run_campaign(
        misbehave,
        [WorkItem(n, n) for n in names],
        settings={},
        tool="test",
        options=CampaignOptions(jobs=2, item_timeout=3, results=results),
    )
    assert time.monotonic() - start < 60
    status = {k: o.status for k, o in run.outcomes.items()}
    assert status == {"a": "ok", "b": "ok", "c": "ok", "d": "ok", "raise": "error", "exit": "crash", "segfault": "crash", "hang": "timeout"}
    assert [run.outcomes[k].value for k in "abcd"] == ["A", "B", "C", "D"]
    assert "RuntimeError: the item raised" in run.outcomes["raise"].error
    assert "exit code 3" in run.outcomes["exit"].error and "SIGSEGV" in run.outcomes["segfault"].error
    assert run.outcomes["hang"].seconds >= 3
    lines = results.read_text().splitlines()
    assert len(lines) == 1 + len(names)  # the header, then one line per item


def test_an_item_that_raises_in_process_is_recorded() -> None:
    run = run_campaign(misbehave, [WorkItem("raise", "raise"), WorkItem("x", "x")], settings={}, tool="test")
    assert run.outcomes["raise"].status == "error" and run.outcomes["x"].value == "X"


@pytest.mark.integration  # worker processes
def test_a_worker_that_cannot_import_its_modules_stops_the_campaign() -> None:
    with pytest.raises(CampaignError, match="could not import"):
        run_campaign(misbehave, [WorkItem("x", "x")], settings={}, tool="test", options=CampaignOptions(jobs=1, imports=("no_such_module_here",)))


def test_a_results_file_of_other_settings_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    run_campaign(misbehave, [WorkItem("x", "x")], settings={"a": 1}, tool="test", options=CampaignOptions(results=results))
    with pytest.raises(CampaignError, match=r"other settings \(a 1, not 2\)"):
        run_campaign(misbehave, [WorkItem("x", "x")], settings={"a": 2}, tool="test", options=CampaignOptions(results=results))
    again = run_campaign(misbehave, [WorkItem("x", "x"), WorkItem("y", "y")], settings={"a": 1}, tool="test", options=CampaignOptions(results=results))
    assert again.resumed == 1 and set(again.outcomes) == {"x", "y"}


def test_settings_that_differ_are_named_alone_in_key_order(tmp_path: Path) -> None:
    """A resume or a merge of other settings names only the settings that differ, sorted by key."""
    results = tmp_path / "r.jsonl"
    before = {"seeds": [0, 3], "max_ops": 5, "examples": 3, "tracing_mode": "fake"}
    run_campaign(misbehave, [WorkItem("x", "x")], settings=before, tool="test", options=CampaignOptions(results=results))
    after = {"tracing_mode": "fake", "examples": 25, "seeds": [0, 3], "max_ops": 10, "untrusted_ops": True}
    with pytest.raises(CampaignError) as info:
        run_campaign(misbehave, [WorkItem("x", "x")], settings=after, tool="test", options=CampaignOptions(results=results))
    assert "(examples 3, not 25; max_ops 5, not 10; untrusted_ops unset, not true)" in str(info.value)
    assert "seeds" not in str(info.value) and "tracing_mode" not in str(info.value)
    other = tmp_path / "other.jsonl"
    run_campaign(misbehave, [WorkItem("x", "x")], settings=after, tool="test", options=CampaignOptions(results=other))
    with pytest.raises(CampaignError, match=r"other settings than .*r\.jsonl: examples 25, not 3; max_ops 10, not 5; untrusted_ops true, not unset$"):
        merge_results([results, other], tool="test", items=lambda s: [WorkItem("x", "x")])


def test_an_unfinished_shard_or_run_is_named(tmp_path: Path) -> None:
    items = [WorkItem(n, n) for n in "abcdefg"]
    run_campaign(misbehave, items, settings={}, tool="test", options=CampaignOptions(shard=(1, 2), results=tmp_path / "1.jsonl"))
    partial = tmp_path / "2.jsonl"
    run_campaign(misbehave, items, settings={}, tool="test", options=CampaignOptions(shard=(2, 2), results=partial))
    partial.write_text("\n".join(partial.read_text().splitlines()[:2]) + "\n")  # the header and one item of three
    with pytest.raises(CampaignError, match=r"^shard 2/2 incomplete: 1 of 3 items \(resume it\)"):
        merge_results([tmp_path / "1.jsonl", partial], tool="test", items=lambda s: items)
    whole = tmp_path / "whole.jsonl"
    run_campaign(misbehave, items[:5], settings={}, tool="test", options=CampaignOptions(results=whole))
    with pytest.raises(CampaignError, match=r"^the run is incomplete: 5 of 7 items recorded"):
        merge_results([whole], tool="test", items=lambda s: items)


def test_merge_refuses_missing_and_foreign_items(tmp_path: Path) -> None:
    items = [WorkItem(n, n) for n in "abcde"]
    for k in (1, 2):
        run_campaign(misbehave, items, settings={}, tool="test", options=CampaignOptions(shard=(k, 3), results=tmp_path / f"{k}.jsonl"))
    with pytest.raises(CampaignError, match=r"^shard 3/3 missing \(--allow-missing"):
        merge_results([tmp_path / "1.jsonl", tmp_path / "2.jsonl"], tool="test", items=lambda s: items)
    _, partial = merge_results([tmp_path / "1.jsonl", tmp_path / "2.jsonl"], tool="test", items=lambda s: items, allow_missing=True)
    assert len(partial) == 4
    with pytest.raises(CampaignError, match="not an item of its shard"):
        merge_results([tmp_path / "1.jsonl"], tool="test", items=lambda s: items[:1])
    with pytest.raises(CampaignError, match="not test-other"):
        merge_results([tmp_path / "1.jsonl"], tool="test-other", items=lambda s: items)


@pytest.mark.parametrize(
    ("old", "new"),
    [("rewrite.testing.soak", "tools.soak"), ("aliasing.verification.audit", "tools.audit"),
     ("aliasing.verification.storage_audit", "tools.storage_audit")],
)
def test_results_files_naming_a_tools_old_module_resume_and_merge(tmp_path: Path, old: str, new: str) -> None:
    """A results file written before the tools moved out of the library names the tool's old module."""
    items = [WorkItem(n, n) for n in "ab"]
    results = tmp_path / "old.jsonl"
    run_campaign(misbehave, items[:1], settings={}, tool=new, options=CampaignOptions(results=results))
    header, *rest = results.read_text().splitlines()
    results.write_text("\n".join([json.dumps({**json.loads(header), "tool": old}), *rest]) + "\n")
    again = run_campaign(misbehave, items, settings={}, tool=new, options=CampaignOptions(results=results))
    assert again.resumed == 1 and set(again.outcomes) == {"a", "b"}
    _, outcomes = merge_results([results], tool=new, items=lambda s: items)
    assert {k: o.value for k, o in outcomes.items()} == {"a": "A", "b": "B"}
    with pytest.raises(CampaignError, match=f"is a {new} campaign, not test"):
        merge_results([results], tool="test", items=lambda s: items)


# ---------------------------------------------------------------------------- the audit


def _audit_json(tmp_path: Path, name: str, *extra: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    assert audit_module.main([*AUDIT_SLICE, "--json", str(out), *extra]) == 0
    data: dict[str, Any] = json.loads(out.read_text())
    data["summary"].pop("runtime_s")
    return data


@pytest.mark.integration  # worker processes
def test_audit_in_two_workers_and_in_shards_equals_one_worker(tmp_path: Path) -> None:
    one = _audit_json(tmp_path, "one", "--jobs", "1")
    assert one["summary"]["samples"] > 0 and set(one["ops"]) == {"add", "mul"}
    assert _audit_json(tmp_path, "two", "--jobs", "2") == one
    for k in (1, 2):
        _audit_json(tmp_path, f"shard{k}", "--shard", f"{k}/2", "--results", str(tmp_path / f"shard{k}.jsonl"))
    merged = tmp_path / "merged.json"
    files = [str(tmp_path / "shard1.jsonl"), str(tmp_path / "shard2.jsonl")]
    assert campaign.main(["merge", *files, "--", "--json", str(merged), "--quiet"]) == 0
    data = json.loads(merged.read_text())
    data["summary"].pop("runtime_s")
    assert data == one


def test_an_op_whose_item_failed_is_listed_as_not_run() -> None:
    settings = audit_module._campaign_settings(["abs", "add"], 1, 0, 60.0, True, False, 1, ())
    crashed = campaign.Outcome("abs", "crash", None, "worker process killed by SIGSEGV", 1.0)
    ran = campaign.Outcome("add", "ok", audit_module.audit_item(settings, "add"), "", 2.0)
    report = audit_module._fold(settings, {"abs": crashed, "add": ran})
    assert report.not_run == {"abs": "crash: worker process killed by SIGSEGV"}
    assert {r.op for r in report.results} == {"add"} and report.runtime_s == 3.0


def test_a_custom_effect_table_stays_in_process() -> None:
    custom = audit_module.DEFAULT_EFFECTS.with_rule(audit_module.torch.ops.aten.abs.default, lambda node, facts: None)
    with pytest.raises(audit_module.AuditError, match="this process only"):
        audit_module.audit(["abs"], effects=custom, campaign_options=CampaignOptions(jobs=2))


# ---------------------------------------------------------------------------- the soak


def _soak_figures(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert soak.main(argv) == 0
    figures: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    figures.pop("minutes")
    return figures


@pytest.fixture(scope="module")
def soak_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The figures of the soak slice in one worker process."""
    out = tmp_path_factory.mktemp("soak") / "one.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "tools.soak", *SOAK_SLICE, "--jobs", "1", "--results", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=True,
    )
    figures: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    figures.pop("minutes")
    assert figures["rounds"] == 4 and figures["programs_run"] >= 12 and figures["rounds_failed"] == 0
    return figures


@pytest.mark.integration  # worker processes
def test_soak_in_two_workers_and_in_shards_equals_one_worker(
    soak_reference: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _soak_figures(capsys, [*SOAK_SLICE, "--jobs", "2"]) == soak_reference
    files = [str(tmp_path / f"{k}.jsonl") for k in (1, 2, 3)]
    for k, path in enumerate(files, start=1):
        _soak_figures(capsys, [*SOAK_SLICE, "--shard", f"{k}/3", "--results", path])
    assert _soak_figures(capsys, ["--merge", *files]) == soak_reference


@pytest.mark.integration  # worker processes
def test_a_killed_soak_resumes_to_the_same_totals(soak_reference: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.soak", *SOAK_SLICE, "--results", str(results)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and len(results.read_text().splitlines()) >= 3:  # the header and two rounds
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.kill()
    finally:
        proc.kill()
        proc.wait(30)
    recorded = len(results.read_text().splitlines()) - 1
    assert 2 <= recorded < 4
    assert _soak_figures(capsys, [*SOAK_SLICE, "--results", str(results)]) == soak_reference
    assert len(results.read_text().splitlines()) == 1 + 4  # the resumed run added only the rest


PASS_SLICE = ["--seeds", "0..1", "--examples", "6", "--max-ops", "5", "--progress", "0"]


def test_soak_checks_a_pass_of_your_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--pass MODULE:FUNCTION``: a wrong pass fails the soak with repro files that fail again; the
    library's own pass, given as a pass of one's own (it takes ``donated_inputs=``), is clean."""
    out = tmp_path / "repros"
    assert soak.main([*PASS_SLICE, "--pass", "tools.broken:drop_every_clone", "--out", str(out)]) == 1
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["pass_spec"] == "tools.broken:drop_every_clone"
    assert set(figures["failures"]) == set(soak.PASS_CHECKS) and figures["failures"]["equivalence"] >= 1
    repro = Path(figures["repro_files"][0])
    assert "(pass tools.broken:drop_every_clone)" in repro.read_text()
    again = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert again.returncode != 0 and "rewrite.errors.NotEquivalent" in again.stderr, again.stderr[-2000:]

    assert soak.main([*PASS_SLICE, "--pass", "rewrite:eliminate_clones", "--out", str(tmp_path / "clean")]) == 0
    clean = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert clean["failures"] == {"raises": 0, "equivalence": 0} and clean["clones_removed"] > 0
    assert not (tmp_path / "clean").exists()


@pytest.mark.parametrize(
    ("spec", "says"),
    [("nocolon", "is not MODULE:FUNCTION"), ("no_such_module_here:f", "cannot import 'no_such_module_here'"),
     ("tools.broken:no_such_pass", "has no 'no_such_pass'"), ("tools.broken:BROKEN_CONDITIONS", "not a callable pass")],
)
def test_a_bad_pass_spec_is_one_line(spec: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert soak.main(["--rounds", "1", "--pass", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m tools.soak: error: argument --pass: ") and says in err, err


def test_the_soak_prints_its_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert soak.main(["--seeds", "0..1", "--examples", "2", "--max-ops", "3", "--progress", "0.001", "--out", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("soak: ")]
    assert lines[-1].startswith("soak: 2/2 rounds, ") and "programs, failures: analysis 0, raises 0" in lines[-1], lines


def test_merging_with_a_shard_missing_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(tmp_path / f"{k}.jsonl") for k in (1, 2)]
    for k, path in enumerate(files, start=1):
        _soak_figures(capsys, ["--seeds", "0..2", "--examples", "2", "--max-ops", "3", "--shard", f"{k}/3", "--results", path])
    assert campaign.main(["merge", *files]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "python -m tools.soak: error: shard 3/3 missing (--allow-missing reports the others)\n"


@pytest.mark.integration  # worker processes
def test_soak_workers_start_without_warnings() -> None:
    """The workers run ``tools.soak`` again as ``__mp_main__``: the forkserver must not have imported it
    under its own name first (runpy's RuntimeWarning, once per worker)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tools.soak", "--seeds", "0..1", "--examples", "2", "--max-ops", "3", "--jobs", "2", "--progress", "0"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=True,
    )
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.integration  # worker processes
def test_a_terminated_soak_stops_its_workers_quietly(tmp_path: Path) -> None:
    """``kill -TERM`` of a soak with workers: it stops them and exits (143) with nothing on stderr, and
    no worker lives on to print a BrokenPipeError traceback into whatever runs next."""
    results = tmp_path / "terminated.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.soak", "--seeds", "0..40", "--examples", "25", "--jobs", "2", "--progress", "0",
         "--results", str(results), "--out", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and len(results.read_text().splitlines()) >= 2:  # the header and a round
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be terminated"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # until every process sharing the pipe (the workers too) is gone
    finally:
        proc.kill()
        proc.wait(30)
    # multiprocessing's resource tracker may report semaphores left at shutdown (seen in the vLLM
    # environment's torch, not in the CPU wheel's): its two lines are not the campaign's output
    tracker = re.compile(r"^.*resource_tracker.*leaked semaphore.*$\n^\s+warnings\.warn\(.*$\n?", re.MULTILINE)
    assert proc.returncode == 128 + signal.SIGTERM and tracker.sub("", err) == "", err


def test_soak_refuses_to_shard_a_time_bounded_run() -> None:
    with pytest.raises(soak.SoakError, match="rounds"):
        soak.run_campaign(0.1, campaign_options=CampaignOptions(shard=(1, 2)))


# ---------------------------------------------------------------------------- Ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head on 127.0.0.1 with two CPUs, stopped at the end."""
    pytest.importorskip("ray", reason="the Ray path needs the ray extra: pip install 'fx-aliasing[ray]'")
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    port = _free_port()
    temp = tmp_path_factory.mktemp("ray")
    start = [str(ray_cli), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"]
    subprocess.run(start, check=True, timeout=180, capture_output=True)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(ray_cli), "stop"], timeout=120, capture_output=True, check=False)


@pytest.mark.integration  # worker processes
@pytest.mark.ray
def test_soak_on_ray_equals_one_worker(ray_head: str, soak_reference: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert _soak_figures(capsys, [*SOAK_SLICE, "--ray", ray_head, "--jobs", "2"]) == soak_reference


@pytest.mark.integration  # worker processes
@pytest.mark.ray
def test_a_crash_on_ray_is_recorded_and_the_run_completes(ray_head: str) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this file
    names = ["a", "exit", "raise", "b"]
    run = run_campaign(misbehave, [WorkItem(n, n) for n in names], settings={}, tool="test", options=CampaignOptions(jobs=2, ray_address=ray_head))
    status = {k: o.status for k, o in run.outcomes.items()}
    assert status == {"a": "ok", "b": "ok", "exit": "crash", "raise": "error"}  # the pool restarted after the crash
    assert run.outcomes["b"].value == "B"


def test_a_ray_pool_that_dies_while_it_restarts_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a crash the new pool's actors can die while they start (the cluster is still
    # reaping the old ones): the restart tries again, and names the cause when it gives up.
    monkeypatch.setattr(campaign.time, "sleep", lambda s: None)
    made: list[int] = []

    def make_pool(failures: int) -> Any:
        made.append(1)
        if len(made) <= failures:
            raise RuntimeError("The actor died unexpectedly before finishing this task.\nmore detail")
        return "pool"

    pool = object.__new__(campaign._RayPool)
    pool.slots, pool.address = 2, "127.0.0.1:1"
    pool.make_pool = lambda: make_pool(2)
    assert pool._new_pool() == "pool" and len(made) == 3
    made.clear()
    pool.make_pool = lambda: make_pool(5)
    with pytest.raises(CampaignError, match=r"cannot restart the Ray pool of 2 on 127.0.0.1:1 \(3 tries\): RuntimeError: The actor died"):
        pool._new_pool()
    assert len(made) == 3
