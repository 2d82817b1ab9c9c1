"""An interrupted extraction resumed: the finished runs that counted are taken over under the same PR key, the
others run again; no PR key, another key or a run that never finished means running again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_extraction_runs import BACKEND_BASE, BACKEND_HEAD, F, P, _two_commits

from tasks_lib.core.constants import ExtractionStatus, RunStatus
from tasks_lib.curation import extraction, resume
from tasks_lib.engine import RunResult
from tasks_lib.sources.record import load_source

HEAD = {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": P}
BASE = {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": F}
KEY = ("harness", "deps", "base", "head", "", "3", "2")


@pytest.fixture
def pr(tmp_path):
    return _two_commits(tmp_path, BACKEND_BASE, BACKEND_HEAD)


def _engine(seen: list[str], stop_at: str = "", status: dict[str, RunStatus] | None = None):
    """A stand-in for `engine.run_tests`: writes run.json as the engine does when a run finishes; raises
    KeyboardInterrupt when it reaches run `stop_at` (before any run.json, as a stop does)."""

    def run(req):
        name = Path(req.log_dir).name
        if name == stop_at:
            raise KeyboardInterrupt
        seen.append(name)
        Path(req.log_dir).mkdir(parents=True, exist_ok=True)
        outcomes = HEAD if name.startswith("head") else BASE
        res = RunResult((status or {}).get(name, RunStatus.COMPLETED), tests=dict(outcomes), suite_ran=True)
        res.log_dir, res.image = str(req.log_dir), f"img-{name}"
        (Path(req.log_dir) / "run.json").write_text(json.dumps(res.to_dict()))
        return res

    return run


def _extract(repo, base, head, logs, run):
    return extraction.extract(load_source("demo"), repo, 7, base, head, logs, run=run)


def test_a_resumed_extraction_takes_over_the_runs_that_finished(pr, tmp_path):
    repo, base, head = pr
    logs = tmp_path / "logs"
    resume.set_pr_key(logs, KEY)
    first: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        _extract(repo, base, head, logs, _engine(first, stop_at="head-3"))
    assert first == ["head-1", "base-1", "head-2"]
    again: list[str] = []
    result = _extract(repo, base, head, logs, _engine(again))
    assert again == ["head-3", "base-2"]
    assert result.status == ExtractionStatus.OK and (result.head_runs, result.base_runs) == (3, 2)
    assert result.backend_fail_to_pass == ["tests/test_items.py::test_two"]
    whole: list[str] = []
    uninterrupted = _extract(repo, base, head, tmp_path / "whole", _engine(whole))
    assert len(whole) == 5 and uninterrupted.to_row()["backend_fail_to_pass"] == result.backend_fail_to_pass


@pytest.mark.parametrize("second_key", [None, ("another harness", *KEY[1:])], ids=["no key", "another key"])
def test_without_the_same_pr_key_every_run_runs_again(pr, tmp_path, second_key):
    repo, base, head = pr
    logs = tmp_path / "logs"
    resume.set_pr_key(logs, KEY)
    with pytest.raises(KeyboardInterrupt):
        _extract(repo, base, head, logs, _engine([], stop_at="head-2"))
    resume.set_pr_key(logs, second_key)
    again: list[str] = []
    _extract(repo, base, head, logs, _engine(again))
    assert again == ["head-1", "base-1", "head-2", "head-3", "base-2"]


def test_a_run_that_did_not_count_runs_again(pr, tmp_path):
    """A run with an infrastructure error stops the PR (and Prefect retries it): it is never taken over."""
    repo, base, head = pr
    logs = tmp_path / "logs"
    resume.set_pr_key(logs, KEY)
    broken = _extract(repo, base, head, logs, _engine([], status={"head-2": RunStatus.INFRA_ERROR}))
    assert broken.status == ExtractionStatus.INFRA_ERROR
    assert not (logs / "head-2" / resume.RUN_MARK_FILE).exists()
    again: list[str] = []
    assert _extract(repo, base, head, logs, _engine(again)).status == ExtractionStatus.OK
    assert again == ["head-2", "head-3", "base-2"]


def test_a_run_folder_without_its_run_json_runs_again(pr, tmp_path):
    repo, base, head = pr
    logs = tmp_path / "logs"
    resume.set_pr_key(logs, KEY)
    with pytest.raises(KeyboardInterrupt):
        _extract(repo, base, head, logs, _engine([], stop_at="head-2"))
    (logs / "base-1" / "run.json").unlink()  # e.g. a run started again, then stopped before it finished
    again: list[str] = []
    _extract(repo, base, head, logs, _engine(again))
    assert again == ["base-1", "head-2", "head-3", "base-2"]


def test_the_engine_code_is_part_of_the_pr_key(tmp_path, monkeypatch):
    resume.set_pr_key(tmp_path, KEY)
    before = (tmp_path / resume.PR_KEY_FILE).read_text()
    monkeypatch.setattr(resume, "engine_digest", lambda: "other engine code")
    resume.set_pr_key(tmp_path, KEY)
    assert (tmp_path / resume.PR_KEY_FILE).read_text() != before


def test_a_run_key_reads_a_patch_of_undecodable_bytes(tmp_path):
    """A patch of a Latin-1 file holds surrogate escapes (read with surrogateescape): its key is still made."""
    from tasks_lib import engine

    resume.set_pr_key(tmp_path, KEY)
    latin = b"+caf\xe9\n".decode("utf-8", "surrogateescape")
    request = engine.RunRequest(
        load_source("demo"), tmp_path, "base", tmp_path / "head-1", (engine.PatchInput("gold", latin),)
    )
    assert len(resume.run_key(tmp_path, request)) == 64


# --- A PR that timed out after its retries is settled under its key ------------------------------------------


def test_an_extraction_that_timed_out_is_settled_under_its_key(pr, tmp_path):
    repo, base, head = pr
    logs = tmp_path / "logs"
    resume.set_pr_key(logs, KEY)
    result = _extract(repo, base, head, logs, _engine([], status={"head-1": RunStatus.TIMEOUT}))
    assert result.status == ExtractionStatus.TIMEOUT
    record = resume.settle(logs)
    assert record is not None and record["status"] == "timeout" and record["number"] == 7
    assert resume.settled(logs, KEY) == record
    # another key (here: another base-run count) runs it
    assert resume.settled(logs, (*KEY[:-1], "9")) is None
    resume.set_pr_key(logs, None)  # --refresh
    assert resume.settled(logs, KEY) is None


def test_an_infrastructure_error_is_never_settled(tmp_path):
    resume.set_pr_key(tmp_path, KEY)
    (tmp_path / resume.RECORD_FILE).write_text(json.dumps({"number": 7, "status": "infra_error"}))
    assert resume.settle(tmp_path) is None
    assert resume.settled(tmp_path, KEY) is None


def test_a_pr_without_its_key_or_record_is_not_settled(tmp_path):
    (tmp_path / resume.RECORD_FILE).write_text(json.dumps({"number": 7, "status": "timeout"}))
    assert resume.settle(tmp_path) == {"number": 7, "status": "timeout"}  # reported as it ended ...
    assert not (tmp_path / resume.SETTLED_FILE).exists()  # ... but no key (a refreshed PR): not settled
    resume.set_pr_key(tmp_path, KEY)
    (tmp_path / resume.RECORD_FILE).unlink()
    assert resume.settle(tmp_path) is None


def test_the_season_does_not_run_a_settled_pr_again(tmp_path, monkeypatch):
    """`_extract_all` over two PRs: the first times out for good (its record written, the task failing as
    extract_pr does after its retries); run again, the season reports it settled without submitting it, and
    `--refresh` submits it again."""
    from flows import curation as flow
    from tasks_lib.curation import plan
    from tasks_lib.curation.season import load_season

    submitted: list[int] = []

    class Future:
        def __init__(self, job_number, log_dir):
            self.number, self.log_dir = job_number, Path(log_dir)

        def result(self):
            row = extraction.ExtractionResult(self.number, ExtractionStatus.OK, "b", "h").to_row()
            if self.number == 1:
                row = extraction.ExtractionResult(
                    self.number, ExtractionStatus.TIMEOUT, "b", "h", error="wall"
                ).to_row()
                (self.log_dir / resume.RECORD_FILE).write_text(json.dumps(row))
                raise flow.TransientExtractionError("#1: timeout: wall")
            return row

    stand_in_extraction(monkeypatch, Future, submitted)
    spec = load_season("demo")
    jobs = [plan.ExtractionJob(n, "b", "h", "deps", None, str(tmp_path / f"pr-{n}")) for n in (1, 2)]

    def season(refresh=frozenset()):
        results: list = []
        submitted.clear()
        flow._extract_all(spec, load_source("demo"), "demo", jobs, None, 1, results, tmp_path, refresh)
        return {r.number: r.status for r in results}, list(submitted)

    assert season() == ({1: ExtractionStatus.TIMEOUT, 2: ExtractionStatus.OK}, [1, 2])
    assert season() == ({1: ExtractionStatus.TIMEOUT, 2: ExtractionStatus.OK}, [2])
    assert season(frozenset({1})) == ({1: ExtractionStatus.TIMEOUT, 2: ExtractionStatus.OK}, [1, 2])
    assert not (tmp_path / "pr-1" / resume.SETTLED_FILE).exists()  # refreshed: no key, nothing settled


def stand_in_extraction(monkeypatch, future, submitted: list[int]) -> None:
    """The season flow's extraction task replaced: each submit records its PR in `submitted` and returns
    `future(number, log_dir)`; jobs run one by one; no result storage."""
    from flows import curation as flow

    class Task:
        def with_options(self, **_):
            return self

        def submit(self, source_name, repo, number, base, head, deps, hr, br, log_dir, *rest):
            submitted.append(number)
            return future(number, log_dir)

    monkeypatch.setattr(flow, "extract_pr", Task())
    monkeypatch.setattr(flow, "windowed", lambda items, submit, limit: ((j, submit(j)) for j in items))
    monkeypatch.setattr(flow.prefect_env, "result_storage", lambda: None)
