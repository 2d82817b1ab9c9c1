"""Where a run folder stands (issue 39, item 5) and a run's wall-clock budget (item 2): `pbench report` reads
finished runs only and names the other folders, a refused plan leaves nothing that squats its run id, and a
run its budget cut short records what it never started, has no report, and finishes on a rerun."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.judge import run_state, runs

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"


def _mirror(tmp_path: Path) -> Path:
    origin = tmp_path / "mirror"
    subprocess.run(["git", "init", "-q", str(origin)], check=True)
    subprocess.run(
        ["git", "-C", str(origin), "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
         "--allow-empty", "-m", "base"],
        check=True,
    )  # fmt: skip
    return origin


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """Four copies of the published instance (ids -1 .. -4) and a mirror to clone; outputs under tmp_path."""
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path / "out"))
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    rows = [{**record, "instance_id": f"{record['instance_id']}-{n}"} for n in range(1, 5)]
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows, _mirror(tmp_path)


def _predictions(tmp_path: Path, rows: list[dict], name: str = "preds.jsonl", suffix: str = "") -> Path:
    path = tmp_path / name
    path.write_text(
        "".join(
            json.dumps({"instance_id": r["instance_id"], "model_name_or_path": "m", "model_patch": r["patch"] + suffix})
            + "\n"
            for r in rows
        )
    )  # fmt: skip
    return path


def test_a_refused_plan_leaves_nothing_that_squats_its_run_id(corpus, tmp_path):
    """Rule: a plan refused half-way (here: a mirror that is not there, found when the source is cloned) writes
    no run.json, so the corrected retry under the same --run-id, with other predictions, is not refused as
    "another run"; a run.json without a plan beside it (what earlier versions left) claims nothing either."""
    path, rows, origin = corpus
    preds = _predictions(tmp_path, rows)
    with pytest.raises(InputError, match="--mirror .*nope: no such repository"):
        runs.plan_run(str(path), str(preds), "m", "2025-06-01", "r1", mirror=str(tmp_path / "nope"))
    folder = tmp_path / "out" / "runs" / "r1"
    assert not (folder / "run.json").exists()
    other = _predictions(tmp_path, rows, "other.jsonl", suffix="\n")
    plan = runs.plan_run(str(path), str(other), "m", "2025-06-01", "r1", mirror=str(origin))
    assert json.loads((folder / "run.json").read_text())["predictions_fingerprint"] == runs._fingerprint(
        plan.predictions
    )
    (folder / run_state.JOBS_FILE).unlink()  # what a refusal left before this version
    runs.plan_run(str(path), str(preds), "m", "2025-06-01", "r1", mirror=str(origin))
    with pytest.raises(InputError, match="--run-id r1: .* already holds a run of another model"):
        runs.plan_run(str(path), str(other), "m", "2025-06-01", "r1", mirror=str(origin))


def test_a_full_predictions_file_with_a_selection_is_planned_and_the_others_counted(corpus, tmp_path):
    """Rule (issue 39, item 2): `--id` one instance of four with a predictions file of all four: the plan holds
    the one, and run.json (hence report.json) says how many entries were left out."""
    path, rows, origin = corpus
    plan = runs.plan_run(
        str(path), str(_predictions(tmp_path, rows)), "m", "2025-06-01", "sel", ids=[rows[2]["instance_id"]],
        mirror=str(origin),
    )  # fmt: skip
    assert list(plan.jobs) == [rows[2]["instance_id"]] and plan.outside_selection == 3
    assert json.loads((plan.out_dir / "run.json").read_text())["predictions_outside_selection"] == 3
    assert runs.load_plan(plan.out_dir).outside_selection == 3


def test_report_names_every_folder_that_is_not_a_finished_run(tmp_path):
    """Rule: a finished run has report.json; every other folder has one line saying what it is."""
    made = {}
    for name, files in {
        "done": {"run.json": "{}", "report.json": "{}"},
        "score": {},  # what `pbench score` wrote under data/runs/ before it moved to data/scores/
        "leftover": {"run.json": "{}"},
        "running": {"run.json": "{}", run_state.JOBS_FILE: "{}\n{}\n"},
        "cut": {"run.json": "{}", "report.json": "{}"},
    }.items():
        made[name] = tmp_path / name
        made[name].mkdir()
        for file, text in files.items():
            (made[name] / file).write_text(text)
    (made["running"] / "logs" / "a").mkdir(parents=True)
    (made["running"] / "logs" / "a" / run_state.VERDICT_FILE).write_text("{}")
    run_state.write_unfinished(made["cut"], "cut", 5, ["b", "c"], "run budget of 60 s reached")
    finished, others = run_state.finished(made.values())
    assert finished == [made["done"]]
    why = {folder.name: text for folder, text in others}
    assert why["score"].startswith("not a run folder")
    assert why["leftover"].startswith("a refused run's leftover")
    assert why["running"].startswith("in progress or interrupted: 1 of 2 verdict(s) so far")
    assert why["cut"].startswith("unfinished: 2 of 5 instance(s) never started (run budget of 60 s reached")
    run_state.clear_unfinished(made["cut"])
    assert run_state.state(made["cut"]) is None


def test_the_budget_admits_while_time_is_left_and_keeps_the_rest_in_order():
    now = [0.0]
    budget = run_state.Budget(150, clock=lambda: now[0])
    admitted = []
    for iid in budget.admit(["a", "b", "c", "d"]):
        admitted.append(iid)
        now[0] += 100  # each instance takes 100 s
    assert admitted == ["a", "b"] and budget.left == ["c", "d"]
    assert budget.reason() == "run budget of 150 s reached"
    late = run_state.Budget(150, started=now[0] - 200, clock=lambda: now[0])  # counted from an earlier start
    assert list(late.admit(["a", "b"])) == [] and late.left == ["a", "b"]
    unlimited = run_state.Budget(None)
    assert list(unlimited.admit(["a", "b"])) == ["a", "b"] and unlimited.left == []
    with pytest.raises(ValueError):
        run_state.Budget(-1)


def test_a_run_cut_by_its_budget_records_what_it_never_started_and_a_rerun_finishes_it(
    corpus, tmp_path, monkeypatch
):
    """Rule (issue 39, item 2): the evaluation flow (real Prefect, one worker; the scoring replaced by a
    canned verdict that takes 100 s of a fake clock) under a 150 s budget scores two of four instances, writes
    the other two to unfinished.json in the run's order, and no report (so `pbench report` skips the folder).
    The same run without a budget then scores them, writes the report (its `schema_version` first) and
    removes unfinished.json."""
    from flows import evaluation as flow
    from tasks_lib.judge.evaluation import Verdict
    from tasks_lib.judge.reporting import REPORT_SCHEMA_VERSION

    path, rows, origin = corpus
    preds = _predictions(tmp_path, rows)
    now, scored = [0.0], []

    def canned(job, settings=None):
        scored.append(job.instance_id)
        now[0] += 100
        return Verdict(job.instance_id, True, "resolved", f2p_passed=1, f2p_total=1)

    monkeypatch.setattr(runs, "score_job", canned)
    monkeypatch.setattr(run_state, "_now", lambda: now[0])
    plan = runs.plan_run(str(path), str(preds), "m", "2025-06-01", "budget", mirror=str(origin))
    order = runs.schedule(plan)
    left = flow.run_evaluation(
        max_workers=1, dataset=str(path), predictions=str(preds), model="m", model_cutoff="2025-06-01",
        run_id="budget", planned=str(plan.out_dir), run_timeout=150,
    )  # fmt: skip
    assert scored == order[:2] and left["unfinished_ids"] == order[2:]
    assert (left["total"], left["scored"]) == (4, 2)
    assert json.loads((plan.out_dir / run_state.UNFINISHED_FILE).read_text())["unfinished_ids"] == order[2:]
    assert not (plan.out_dir / "report.json").exists() and not list(plan.out_dir.glob("*.parquet*"))
    assert run_state.state(plan.out_dir).startswith("unfinished: 2 of 4 instance(s) never started")

    report = flow.run_evaluation(
        max_workers=1, dataset=str(path), predictions=str(preds), model="m", model_cutoff="2025-06-01",
        run_id="budget", planned=str(plan.out_dir),
    )  # fmt: skip
    assert report["resolved"] == 4 and set(report["instances"]) == {r["instance_id"] for r in rows}
    written = json.loads((plan.out_dir / "report.json").read_text())
    assert next(iter(written)) == "schema_version" and written["schema_version"] == REPORT_SCHEMA_VERSION
    assert not (plan.out_dir / run_state.UNFINISHED_FILE).exists() and run_state.state(plan.out_dir) is None
