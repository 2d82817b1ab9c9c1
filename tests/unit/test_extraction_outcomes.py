"""A season's extraction outcomes kept in the repository (`extraction.keep_outcomes`): another machine's season
answers a PR from its kept outcome under the same key and runs nothing; another key, `--refresh` or an
infrastructure error runs it again; the season's wall-time lines travel with the outcomes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from test_extraction_resume import stand_in_extraction

from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.curation import extraction, outcomes, plan, resume
from tasks_lib.sources.record import load_source


def _row(number: int, status=ExtractionStatus.OK, log_dir: str = "") -> dict:
    result = extraction.ExtractionResult(number, status, "b", "h", ["t::f2p"], ["t::p2p"], log_dir=log_dir)
    return result.to_row()


def _runs(log_dir: Path, names=("head-1", "base-1")) -> None:
    for name in names:
        (log_dir / name).mkdir(parents=True)
        run = {"status": "completed", "image": f"img-{name}", "log_dir": str(log_dir / name)}
        (log_dir / name / "run.json").write_text(json.dumps(run))


def test_a_kept_outcome_answers_the_same_pr_under_the_same_key_on_another_machine(tmp_path):
    kept, here, there = tmp_path / "kept", tmp_path / "m1" / "pr-7", tmp_path / "m2" / "pr-7"
    _runs(here)
    row = _row(7, log_dir=str(here)) | {"error": f"image_build_failed (log: {here / 'head-1'})"}
    assert outcomes.keep(kept, 7, "k1", row, here)
    record = outcomes.answer(kept, 7, "k1", there)
    assert record is not None and record["backend_fail_to_pass"] == ["t::f2p"]
    assert record["log_dir"] == str(there)  # the machine's own folder, not the first machine's
    assert json.loads((there / resume.RECORD_FILE).read_text()) == record
    assert not (there / resume.PR_KEY_FILE).exists()  # the run take-over's key is the machine's own
    run = json.loads((there / "base-1" / "run.json").read_text())
    assert run["image"] == "img-base-1" and run["log_dir"] == str(there / "base-1")
    # what the kept file says of the machine: nothing (it is committed)
    assert str(tmp_path) not in (kept / "pr-7.json").read_text()
    assert outcomes.answer(kept, 7, "another key", tmp_path / "m3") is None
    assert outcomes.answer(kept, 8, "k1", tmp_path / "m3") is None


def test_files_already_in_the_log_folder_are_left_alone(tmp_path):
    kept, logs = tmp_path / "kept", tmp_path / "pr-7"
    _runs(logs)
    outcomes.keep(kept, 7, "k1", _row(7), logs)
    (logs / "head-1" / "run.json").write_text('{"mine": 1}')
    outcomes.answer(kept, 7, "k1", logs)
    assert json.loads((logs / "head-1" / "run.json").read_text()) == {"mine": 1}


def test_an_infrastructure_error_is_never_kept_and_an_unreadable_file_runs_the_pr(tmp_path):
    kept = tmp_path / "kept"
    assert not outcomes.keep(kept, 7, "k1", _row(7, ExtractionStatus.INFRA_ERROR), tmp_path)
    assert not (kept / "pr-7.json").exists()
    kept.mkdir()
    (kept / "pr-7.json").write_text("{not json")
    assert outcomes.answer(kept, 7, "k1", tmp_path / "logs") is None


def test_keeping_the_same_outcome_again_leaves_the_file_as_it_was(tmp_path):
    kept, logs = tmp_path / "kept", tmp_path / "pr-7"
    _runs(logs)
    outcomes.keep(kept, 7, "k1", _row(7, log_dir=str(logs)), logs)
    before = (kept / "pr-7.json").stat().st_mtime_ns
    outcomes.keep(kept, 7, "k1", _row(7, log_dir="/elsewhere/pr-7"), logs)
    assert (kept / "pr-7.json").stat().st_mtime_ns == before


def test_the_season_on_another_machine_runs_only_what_has_no_kept_outcome(tmp_path, monkeypatch):
    """`_extract_all` over three PRs on machine 1 (#1 ok, #2 timed out for good, #3 an infrastructure error);
    on machine 2 (empty log folders) the season submits #3 alone, and `--refresh 1` submits #1 again."""
    from flows import curation as flow
    from tasks_lib.curation.season import load_season

    submitted: list[int] = []

    class Future:
        def __init__(self, number, log_dir):
            self.number, self.log_dir = number, Path(log_dir)

        def result(self):
            self.log_dir.mkdir(parents=True, exist_ok=True)
            if self.number == 2:
                (self.log_dir / resume.RECORD_FILE).write_text(json.dumps(_row(2, ExtractionStatus.TIMEOUT)))
                raise flow.TransientExtractionError("#2: timeout: wall")
            if self.number == 3:
                raise flow.TransientExtractionError("#3: infra_error: dockerd")
            return _row(self.number, log_dir=str(self.log_dir))

    kept = tmp_path / "kept"
    stand_in_extraction(monkeypatch, Future, submitted)
    monkeypatch.setattr(flow.outcomes, "folder", lambda season, source: kept)
    spec = dataclasses.replace(load_season("demo"), keep_outcomes=True)

    def season(machine: str, refresh=frozenset()):
        logs = tmp_path / machine
        jobs = [plan.ExtractionJob(n, "b", "h", "deps", None, str(logs / f"pr-{n}")) for n in (1, 2, 3)]
        results: list = []
        submitted.clear()
        flow._extract_all(spec, load_source("demo"), "demo", jobs, None, 1, results, logs, refresh)
        return {r.number: str(r.status) for r in results}, sorted(submitted)

    statuses = {1: "ok", 2: "timeout", 3: "infra_error"}
    assert season("m1") == (statuses, [1, 2, 3])
    assert sorted(p.name for p in kept.glob("pr-*.json")) == ["pr-1.json", "pr-2.json"]
    assert season("m2") == (statuses, [3])
    assert json.loads((tmp_path / "m2" / "pr-1" / resume.RECORD_FILE).read_text())["status"] == "ok"
    assert season("m3", frozenset({1})) == (statuses, [1, 3])


def _line(started: str, pid: int, wall: float, ended: str = "completed") -> dict:
    return {
        "started_at": started,
        "pid": pid,
        "until": None,
        "ended_at": started,
        "wall_s": wall,
        "ended": ended,
    }


def test_the_wall_time_lines_travel_with_the_outcomes_and_a_run_lost_with_its_machine_counts(
    tmp_path, monkeypatch
):
    kept, m1, m2 = tmp_path / "kept", tmp_path / "m1", tmp_path / "m2"
    monkeypatch.setattr(outcomes, "_boot", lambda: "machine 1")
    m1.mkdir()
    (m1 / outcomes.RUNS_FILE).write_text(json.dumps(_line("2026-12-07T01:00:00+00:00", 10, 600.0)) + "\n")
    live = m1 / outcomes.LIVE_DIR
    live.mkdir()
    (live / "11-x.json").write_text(json.dumps(_line("2026-12-07T02:00:00+00:00", 11, 300.0, "running")))
    outcomes.merge_runs(kept, m1)  # as after a PR of the run in progress: then machine 1 is lost
    monkeypatch.setattr(outcomes, "_boot", lambda: "machine 2")
    m2.mkdir()
    outcomes.merge_runs(kept, m2)  # machine 2's season starts
    plan._close_dead_runs(m2 / outcomes.RUNS_FILE, m2 / outcomes.LIVE_DIR)  # as its run ledger does
    outcomes.merge_runs(kept, m2)
    rows = [json.loads(line) for line in (kept / outcomes.RUNS_FILE).read_text().splitlines()]
    assert [(r["pid"], r["wall_s"], r["ended"]) for r in rows] == [
        (10, 600.0, "completed"),
        (11, 300.0, "killed"),
    ]
    assert (m2 / outcomes.RUNS_FILE).read_text() == (kept / outcomes.RUNS_FILE).read_text()
    assert not list((kept / outcomes.LIVE_DIR).glob("*.json"))  # counted once, as its line


def test_a_season_that_does_not_keep_outcomes_writes_none(tmp_path):
    outcomes.merge_runs(None, tmp_path)
    assert not list(tmp_path.iterdir())


def test_a_run_alive_on_this_machine_is_never_counted_killed_by_another_run_of_the_season(tmp_path):
    """A second run of the season in another output folder, on the same boot, while the first still runs: the
    first run's kept live file is not written back (no "killed" line) and its own live file stays."""
    kept, first, second = tmp_path / "kept", tmp_path / "first", tmp_path / "second"
    live = first / outcomes.LIVE_DIR
    live.mkdir(parents=True)
    (live / "11-x.json").write_text(json.dumps(_line("2026-12-07T02:00:00+00:00", 11, 300.0, "running")))
    outcomes.merge_runs(kept, first)
    second.mkdir()
    outcomes.merge_runs(kept, second)
    plan._close_dead_runs(second / outcomes.RUNS_FILE, second / outcomes.LIVE_DIR)
    outcomes.merge_runs(kept, second)
    assert not (kept / outcomes.RUNS_FILE).exists() and not (second / outcomes.RUNS_FILE).exists()
    outcomes.merge_runs(kept, first)
    assert (live / "11-x.json").exists() and (kept / outcomes.LIVE_DIR / "11-x.json").exists()


def test_the_outcome_key_is_the_same_on_every_machine_and_changes_with_what_decides_the_result(monkeypatch):
    """Two machines bootstrap base images with different ids (part of the job's harness key there): the kept
    outcome's key is the same; another base commit, run count or harness version gives another key."""
    from flows import curation as flow
    from tasks_lib.core import constants
    from tasks_lib.curation.season import load_season

    spec, source = load_season("demo"), load_source("demo")

    def job(harness_key="machine 1 image ids", base="b"):
        return plan.ExtractionJob(7, base, "h", "deps", None, "/logs/pr-7", harness_key)

    here = flow._outcome_key(source, spec, job())
    assert flow._outcome_key(source, spec, job("machine 2 image ids")) == here
    assert flow._outcome_key(source, spec, job(base="another")) != here
    assert flow._outcome_key(source, dataclasses.replace(spec, head_runs=5), job()) != here
    monkeypatch.setattr(constants, "HARNESS_VERSION", "another")
    assert flow._outcome_key(source, spec, job()) != here
