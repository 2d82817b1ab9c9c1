"""Evaluation outputs (issue 4, item 5): typed Parquet that analysts read with pandas, an honest report.

The column names and pandas dtypes of `results.parquet` / `tests.parquet` are a contract; the report splits
the score by stack domain, status and contamination relative to the model, and never hides infrastructure
failures among the model's failures.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tasks_lib.core.constants import HARNESS_VERSION, Status
from tasks_lib.core.errors import InputError
from tasks_lib.judge import reporting
from tasks_lib.judge.evaluation import TestRow as Row
from tasks_lib.judge.evaluation import Verdict

CUTOFF = dt.date(2025, 6, 1)

# What pyarrow -> pandas 3 gives for RESULTS_SCHEMA: strings are the `str` dtype, date32 is an object
# column of datetime.date, timestamps keep their UTC zone at microsecond resolution.
RESULTS_DTYPES = {
    "run_id": "str",
    "model": "str",
    "model_cutoff": "object",
    "instance_id": "str",
    "repo": "str",
    "stack_domain": "str",
    "contamination_tier": "str",
    "created_at": "datetime64[us, UTC]",
    "after_model_cutoff": "bool",
    "resolved": "bool",
    "status": "str",
    "infra_failure": "bool",
    "blame": "str",
    "tampering": "object",
    "static_flags": "object",
    "backend_status": "str",
    "frontend_status": "str",
    "f2p_passed": "int64",
    "f2p_total": "int64",
    "p2p_passed": "int64",
    "p2p_total": "int64",
    "exit_code_mismatch": "bool",
    "patch_sha256": "str",
    "image_id": "str",
    "harness_version": "str",
    "duration_s": "float64",
    "attempts": "int64",
    "cached": "bool",
    "executed_by": "str",
    "trace_dir": "str",
    "note": "str",
}

TESTS_DTYPES = {
    "run_id": "str",
    "model": "str",
    "instance_id": "str",
    "side": "str",
    "test_id": "str",
    "expected": "str",
    "outcome": "str",
    "passed": "bool",
}


def instance(n: int, domain: str, tier: str, created_at: str) -> dict:
    return {
        "instance_id": f"acme__shop-{n}",
        "repo": "acme/shop",
        "stack_domain": domain,
        "contamination_tier": tier,
        "created_at": created_at,
    }


def row(side, test_id, expected, outcome):
    return Row(side, test_id, expected, outcome, outcome == "passed")


# Four instances: two merged after the model's cutoff, two before; one infra failure; one mismatch.
INSTANCES = [
    instance(1, "backend_only", "held_out", "2025-07-01T10:00:00Z"),
    instance(2, "fullstack", "public", "2025-03-01T10:00:00Z"),
    instance(3, "backend_only", "held_out", "2025-08-01T10:00:00Z"),
    instance(4, "frontend_only", "public", "2025-01-01T10:00:00Z"),
]
VERDICTS = [
    Verdict(
        "acme__shop-1",
        True,
        Status.RESOLVED.value,
        1,
        1,
        2,
        2,
        backend_status="resolved",
        patch_sha256="a" * 64,
        image_id="sha256:img",
        duration_s=12.5,
        attempts=1,
        trace_dir="/runs/r/logs/acme__shop-1",
        tests=[
            row("backend", "tests/test_a.py::test_new", "fail_to_pass", "passed"),
            row("backend", "tests/test_a.py::test_old", "pass_to_pass", "passed"),
            row("backend", "tests/test_a.py::test_other", "pass_to_pass", "passed"),
        ],
    ),
    Verdict(
        "acme__shop-2",
        False,
        Status.TESTS_FAILED.value,
        1,
        2,
        0,
        1,
        backend_status="resolved",
        frontend_status="tests_failed",
        exit_code_mismatch=True,
        duration_s=30.0,
        attempts=1,
        note="test exit code contradicts the parsed results",
        tests=[
            row("backend", "tests/test_b.py::test_x", "fail_to_pass", "passed"),
            row("frontend", "tests/items.spec.ts:42:3 › Items › archive", "fail_to_pass", "missing"),
            row("backend", "tests/test_b.py::test_y", "pass_to_pass", "skipped"),
        ],
    ),
    Verdict(
        "acme__shop-3",
        False,
        Status.INFRA_ERROR.value,
        0,
        1,
        0,
        0,
        backend_status="infra_error",
        duration_s=900.0,
        attempts=3,
        tests=[row("backend", "tests/test_c.py::test_slow", "fail_to_pass", "missing")],
    ),
    Verdict(
        "acme__shop-4",
        True,
        Status.RESOLVED.value,
        1,
        1,
        0,
        0,
        frontend_status="resolved",
        cached=True,
        tests=[row("frontend", "tests/home.spec.ts:3:1 › Home › loads", "fail_to_pass", "passed")],
    ),
]
META = {"run_id": "run-a", "model": "model-a", "model_cutoff": str(CUTOFF)}


def build(run_id="run-a", model="model-a", verdicts=VERDICTS):
    rows = [
        reporting.result_row(run_id, model, CUTOFF, i, v) for i, v in zip(INSTANCES, verdicts, strict=True)
    ]
    tests = [t for v in verdicts for t in reporting.test_rows(run_id, model, v)]
    return rows, tests


@pytest.fixture
def run_dir(tmp_path) -> tuple[Path, dict]:
    rows, tests = build()
    out = tmp_path / "runs" / "run-a"
    report = reporting.write_run_outputs(out, rows, tests, META)
    return out, report


# --------------------------------------------------------------------------- results.parquet / tests.parquet


def test_results_parquet_has_exactly_the_documented_columns_and_dtypes(run_dir):
    """Rule: `results.parquet` loads in pandas with the documented column names, order and dtypes."""
    out, _ = run_dir
    df = pd.read_parquet(out / "results.parquet")
    assert {c: str(t) for c, t in df.dtypes.items()} == RESULTS_DTYPES
    assert list(df.columns) == list(RESULTS_DTYPES)
    assert len(df) == len(INSTANCES)  # one row per model x instance


def test_results_parquet_values(run_dir):
    """Rule: the stored values are what the verdicts and instances say, typed (dates, UTC times, counts)."""
    out, _ = run_dir
    df = pd.read_parquet(out / "results.parquet").set_index("instance_id")
    assert all(type(v) is dt.date and v == CUTOFF for v in df["model_cutoff"])
    assert df.loc["acme__shop-1", "created_at"] == pd.Timestamp("2025-07-01T10:00:00Z")
    assert str(df.loc["acme__shop-1", "created_at"].tz) == "UTC"
    assert df["after_model_cutoff"].to_dict() == {
        "acme__shop-1": True,
        "acme__shop-2": False,
        "acme__shop-3": True,
        "acme__shop-4": False,
    }
    assert df["infra_failure"].to_dict() == {
        "acme__shop-1": False,
        "acme__shop-2": False,
        "acme__shop-3": True,
        "acme__shop-4": False,
    }
    assert df.loc["acme__shop-2", ["f2p_passed", "f2p_total", "p2p_passed", "p2p_total"]].tolist() == [
        1,
        2,
        0,
        1,
    ]
    assert bool(df.loc["acme__shop-2", "exit_code_mismatch"])
    assert df.loc["acme__shop-3", "attempts"] == 3
    assert df.loc["acme__shop-1", "duration_s"] == 12.5
    assert bool(df.loc["acme__shop-4", "cached"])
    assert pd.isna(df.loc["acme__shop-1", "frontend_status"])  # no frontend side: null, not "None"
    assert (df["harness_version"] == HARNESS_VERSION).all()
    assert (df["model"] == "model-a").all() and (df["run_id"] == "run-a").all()


def test_tests_parquet_has_exactly_the_documented_columns_and_dtypes(run_dir):
    """Rule: `tests.parquet` has one row per graded test, with the documented columns and dtypes."""
    out, _ = run_dir
    df = pd.read_parquet(out / "tests.parquet")
    assert {c: str(t) for c, t in df.dtypes.items()} == TESTS_DTYPES
    assert list(df.columns) == list(TESTS_DTYPES)
    assert len(df) == sum(len(v.tests) for v in VERDICTS)
    missing = df[df["outcome"] == "missing"]
    assert set(missing["instance_id"]) == {"acme__shop-2", "acme__shop-3"}
    assert not missing["passed"].any()
    assert set(df["expected"]) == {"fail_to_pass", "pass_to_pass"}
    assert "tests/items.spec.ts:42:3 › Items › archive" in set(df["test_id"])  # Playwright ids survive


def test_empty_run_still_has_the_typed_schema(tmp_path):
    """Rule: the schema is fixed by the module, not inferred from rows: an empty run has the same dtypes."""
    reporting.write_run_outputs(tmp_path, [], [], META)
    df = pd.read_parquet(tmp_path / "results.parquet")
    assert list(df.columns) == list(RESULTS_DTYPES)
    assert df["resolved"].dtype == bool and df["f2p_passed"].dtype == "int64"
    assert list(pd.read_parquet(tmp_path / "tests.parquet").columns) == list(TESTS_DTYPES)


def test_no_temporary_files_are_left_behind(run_dir):
    """Rule: Parquet is written through a temporary file and a rename; only the outputs remain."""
    out, _ = run_dir
    assert sorted(p.name for p in out.iterdir()) == [
        "report.json",
        "report.txt",
        "results.parquet",
        "tests.parquet",
    ]


# --------------------------------------------------------------------------- report.json


def test_report_json_splits_the_score(run_dir):
    """Rule: the report splits the score by stack domain, status and contamination relative to the model."""
    out, report = run_dir
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report, default=str))
    assert on_disk["run_id"] == "run-a" and on_disk["model"] == "model-a"
    assert on_disk["model_cutoff"] == "2025-06-01"
    assert (on_disk["total"], on_disk["resolved"], on_disk["score"]) == (4, 2, 0.5)
    assert on_disk["by_stack_domain"] == {
        "backend_only": {"resolved": 1, "total": 2, "rate": 0.5},
        "frontend_only": {"resolved": 1, "total": 1, "rate": 1.0},
        "fullstack": {"resolved": 0, "total": 1, "rate": 0.0},
    }
    assert on_disk["by_contamination"] == {
        "after_model_cutoff": {"resolved": 1, "total": 2, "rate": 0.5},
        "before_model_cutoff": {"resolved": 1, "total": 2, "rate": 0.5},
    }
    assert on_disk["by_tier"]["held_out"] == {"resolved": 1, "total": 2, "rate": 0.5}
    assert on_disk["by_status"] == {"infra_error": 1, "resolved": 2, "tests_failed": 1}
    assert on_disk["exit_code_mismatches"] == ["acme__shop-2"]
    assert on_disk["instances"]["acme__shop-3"] == "infra_error"


def test_infra_failures_are_counted_separately(run_dir):
    """Rule: infrastructure failures are reported in their own column, and a score without them is given,
    so harness trouble is never silently mixed into the model's failures."""
    _, report = run_dir
    assert report["infra_failures"] == 1
    assert report["score_excluding_infra"] == round(2 / 3, 4)
    assert report["score"] == 0.5


def test_contamination_split_is_relative_to_the_models_cutoff_not_the_tier():
    """Rule: 'after the model cutoff' compares the merge date with THIS model's cutoff, whatever the tier."""
    inst = instance(9, "backend_only", "public", "2025-06-02T00:00:00Z")  # public for the season, but later
    v = Verdict("acme__shop-9", True, "resolved", 1, 1)
    assert reporting.result_row("r", "m", CUTOFF, inst, v)["after_model_cutoff"] is True
    v_on = dict(inst, created_at="2025-06-01T23:59:59Z")
    assert reporting.result_row("r", "m", CUTOFF, v_on, v)["after_model_cutoff"] is False


@pytest.mark.parametrize("status", ["infra_error", "image_build_failed"])
def test_every_infra_status_is_flagged(status):
    """Rule: infra_error and image_build_failed are infrastructure, in their own column."""
    inst = instance(5, "backend_only", "public", "2025-01-01T00:00:00Z")
    row_ = reporting.result_row("r", "m", CUTOFF, inst, Verdict("acme__shop-5", False, status))
    assert row_["infra_failure"] is True
    report = reporting.build_report([row_], {})
    assert report["infra_failures"] == 1 and report["score_excluding_infra"] == 0.0


@pytest.mark.parametrize(
    "status", ["tests_failed", "patch_apply_failed", "patch_invalid", "test_collection_failed", "timeout"]
)
def test_model_failures_are_not_infra(status):
    """Rule: a patch that fails, does not apply, is invalid, breaks collection or makes its code run out of
    time is the model's failure."""
    inst = instance(6, "backend_only", "public", "2025-01-01T00:00:00Z")
    row_ = reporting.result_row("r", "m", CUTOFF, inst, Verdict("acme__shop-6", False, status))
    assert row_["infra_failure"] is False


def test_blame_and_tampering_reach_the_row_and_the_report():
    """Rule: the verdict's blame decides the infra column (a patched lock that does not build is the patch's);
    what the guards saw is a list column and a section of the report."""
    inst = instance(7, "backend_only", "public", "2025-01-01T00:00:00Z")
    build = Verdict("acme__shop-7", False, "image_build_failed", blame="patch")
    assert reporting.result_row("r", "m", CUTOFF, inst, build)["infra_failure"] is False
    seen = ["the canary test tests/test_x.py must fail and was reported passed"]
    tampered = Verdict(
        "acme__shop-7",
        False,
        "tests_failed",
        blame="patch",
        tampering=seen,
        static_flags=["runner: backend/app/x.py:1: imports the test runner (import _pytest)"],
    )
    row_ = reporting.result_row("r", "m", CUTOFF, inst, tampered)
    assert row_["tampering"] == seen and row_["blame"] == "patch"
    report = reporting.build_report([row_], {"run_id": "r", "model": "m", "model_cutoff": "2025-06-01"})
    assert report["tampered"] == {"acme__shop-7": seen}
    assert "tampering seen (never a pass)" in reporting.text_table(report)


# --------------------------------------------------------------------------- text table


def test_text_table_is_fixed_width(run_dir):
    """Rule: the run's text table is fixed-width: split rows align with the header and with each other."""
    out, report = run_dir
    text = reporting.text_table(report)
    assert (out / "report.txt").read_text() == text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("split"))
    table = []
    for line in lines[header:]:
        if not line:
            break
        table.append(line)
    assert len(table) == 2 + 3 + 2 + 2  # header, rule, 3 domains, 2 contamination sides, 2 tiers
    assert len({len(line) for line in table}) == 1
    slashes = {line.index("/") for line in table[2:]}
    assert len(slashes) == 1  # the counts column lines up
    assert any(line.startswith("contamination: after_model_cutoff") for line in table)
    assert "model-a" in lines[0] and "2025-06-01" in lines[0] and "run-a" in lines[0]
    assert "infra failures 1" in text
    assert "acme__shop-2" in text  # exit-code contradictions are listed by instance


def test_text_table_status_counts_align():
    """Rule: the status section is a right-aligned count column followed by the status."""
    rows, _ = build()
    text = reporting.text_table(reporting.build_report(rows, META))
    section = text.split("verdicts by status\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert section == ["    1  infra_error", "    2  resolved", "    1  tests_failed"]


# --------------------------------------------------------------------------- leaderboard


def test_leaderboard_over_two_runs_of_two_models(tmp_path):
    """Rule: `pbench report DIR…` aggregates runs into models x domains x tiers, with failures by kind."""
    rows_a, tests_a = build("run-a", "model-a")
    reporting.write_run_outputs(tmp_path / "run-a", rows_a, tests_a, META)
    verdicts_b = [
        Verdict(v.instance_id, False, Status.TESTS_FAILED.value, 0, v.f2p_total) if i < 2 else v
        for i, v in enumerate(VERDICTS)
    ]
    rows_b, tests_b = build("run-b", "model-b", verdicts_b)
    reporting.write_run_outputs(
        tmp_path / "run-b", rows_b, tests_b, {**META, "run_id": "run-b", "model": "model-b"}
    )

    text = reporting.leaderboard([tmp_path / "run-a", tmp_path / "run-b"])
    lines = text.splitlines()
    assert "2 run(s), 8 verdicts" in lines[0]
    header = lines[2].split()
    assert header == [
        "model",
        "all",
        "backend_only",
        "frontend_only",
        "fullstack",
        "tier:held_out",
        "tier:public",
        "after-cutoff",
    ]
    row_a = next(line for line in lines if line.startswith("model-a"))
    row_b = next(line for line in lines if line.startswith("model-b"))
    assert row_a.split()[1:] == ["2/4", "1/2", "1/1", "0/1", "1/2", "1/2", "1/2"]
    assert row_b.split()[1:] == ["1/4", "0/2", "1/1", "0/1", "0/2", "1/2", "0/2"]
    assert len(row_a) == len(row_b) == len(lines[2])  # fixed width
    failures = text.split("failures by kind\n", 1)[1].splitlines()
    assert "    1  tests_failed             model-a" in failures
    assert "    1  infra_error              model-a" in failures
    assert "    2  tests_failed             model-b" in failures
    assert "    1  infra_error              model-b" in failures


def test_report_gives_each_runs_score_with_its_wilson_interval_as_text_json_and_html(tmp_path):
    """Rule (issue 39, item 7): `pbench report` gives each run's score with its 95 % interval in the text
    table, in --json (a report.json written before the interval was gets it from its counts) and on the
    HTML page; the interval is scipy's Wilson interval of resolved / selected instances."""
    from scipy import stats

    from tasks_lib.judge import leaderboard

    rows_a, tests_a = build("run-a", "model-a")
    reporting.write_run_outputs(tmp_path / "run-a", rows_a, tests_a, META)
    ref = stats.binomtest(2, 4).proportion_ci(0.95, method="wilson")
    low, high = ref.low * 100, ref.high * 100
    text = reporting.leaderboard([tmp_path / "run-a"])
    assert f"run-a{' ' * 23} model-a{' ' * 21} 2/4 50.0% (95 % interval {low:.1f}–{high:.1f}%)" in text
    reports = reporting.run_reports([tmp_path / "run-a"])
    assert reports[0]["score_interval"] == pytest.approx([ref.low, ref.high], abs=1e-4)
    old = json.loads((tmp_path / "run-a" / "report.json").read_text())
    del old["score_interval"]
    (tmp_path / "run-a" / "report.json").write_text(json.dumps(old))
    assert reporting.run_reports([tmp_path / "run-a"])[0]["score_interval"] == reports[0]["score_interval"]
    page = leaderboard.write_html(reporting.load_results([tmp_path / "run-a"]), tmp_path / "page").read_text()
    runs_table = page.split('<table id="runs">', 1)[1].split("</table>", 1)[0]
    assert (
        f"<td>run-a</td><td>model-a</td><td>2/4 50.0% (95 % interval {low:.1f}–{high:.1f}%)</td>"
        in runs_table
    )


def test_leaderboard_refuses_a_folder_that_is_not_a_run(tmp_path):
    """Rule: a folder without results.parquet is named in an InputError (exit 2), not skipped."""
    with pytest.raises(InputError, match="results.parquet"):
        reporting.leaderboard([tmp_path])


def test_a_missing_prediction_counts_in_the_denominator_and_the_swebench_lists():
    """Rule: score = resolved / selected instances; a missing prediction is `no_prediction` (unresolved, in
    `incomplete_ids`), an empty patch is in `empty_patch_ids`, the harness's failures in `error_ids`."""
    empty = Verdict(
        "acme__shop-2", False, Status.TESTS_FAILED.value, patch_sha256=reporting.EMPTY_PATCH_SHA256
    )
    missing = Verdict("acme__shop-4", False, Status.NO_PREDICTION.value)
    verdicts = [VERDICTS[0], empty, VERDICTS[2], missing]
    rows, _ = build(verdicts=verdicts)
    report = reporting.build_report(rows, META)
    assert (report["total"], report["resolved"], report["score"]) == (4, 1, 0.25)
    assert report["incomplete_ids"] == ["acme__shop-4"]
    assert report["empty_patch_ids"] == ["acme__shop-2"]
    assert report["error_ids"] == ["acme__shop-3"]
    assert report["resolved_ids"] == ["acme__shop-1"] and report["unresolved_ids"] == []
    assert report["completed_ids"] == ["acme__shop-1"]
    assert report["submitted_ids"] == ["acme__shop-1", "acme__shop-2", "acme__shop-3"]
    assert (report["total_instances"], report["submitted_instances"], report["error_instances"]) == (4, 3, 1)
    assert not rows[3]["infra_failure"]  # the model's choice, not the harness's trouble
    text = reporting.text_table(report)
    assert "score 25.0% (resolved / instances; 95 % interval 4.6–69.9%)" in text
    assert "no prediction (unresolved): acme__shop-4" in text


def test_a_prediction_of_another_model_is_refused(tmp_path):
    from tasks_lib.judge.predictions import PredictionsError, load_predictions

    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"instance_id": "acme__shop-1", "model_name_or_path": "b", "model_patch": ""}))
    with pytest.raises(PredictionsError) as err:
        load_predictions(path, ["acme__shop-1"], default_model="a", require_model=True)
    assert "'b'" in str(err.value) and "--model is 'a'" in str(err.value) and "line 1" in str(err.value)
    (ok,) = load_predictions(path, ["acme__shop-1"], default_model="a")  # without the check: as before
    assert ok.model_name_or_path == "b"


@pytest.mark.parametrize("batch_rows", [1, 3, 2000])
def test_rows_written_as_verdicts_arrive_give_the_same_files_as_rows_kept_in_memory(tmp_path, batch_rows):
    """RunWriter (the evaluation flow's, so that its memory stays flat) writes what write_run_outputs writes:
    same tables in the run's instance order whatever order the verdicts came in, same report."""
    rows, tests = build()
    kept = tmp_path / "kept"
    want = reporting.write_run_outputs(kept, rows, tests, META)
    streamed = tmp_path / "streamed"
    writer = reporting.RunWriter(streamed, [r["instance_id"] for r in rows], batch_rows=batch_rows)
    for r in reversed(rows):  # verdicts arrive in any order
        writer.add(r, [t for t in tests if t["instance_id"] == r["instance_id"]])
    assert writer.finish(META) == want
    for name in ("results.parquet", "tests.parquet"):
        assert pq.read_table(streamed / name).equals(pq.read_table(kept / name)), name
    for name in ("report.json", "report.txt"):
        assert (streamed / name).read_text() == (kept / name).read_text()
    assert sorted(p.name for p in streamed.iterdir()) == sorted(p.name for p in kept.iterdir())


def test_a_streamed_run_with_no_rows_still_has_the_typed_schema(tmp_path):
    writer = reporting.RunWriter(tmp_path, [])
    writer.finish(META)
    assert pq.read_table(tmp_path / "results.parquet").schema.equals(reporting.RESULTS_SCHEMA)
    assert pq.read_table(tmp_path / "tests.parquet").num_rows == 0


def test_the_run_schedules_the_longest_expected_instances_first():
    """Longest-processing-time first: a frontend side (backend-serve, dev server, browser) before backend-only
    ones, more test files before fewer; instances without a prediction are not scheduled."""
    from tasks_lib.corpus.instance import TaskInstance
    from tasks_lib.judge.runs import RunPlan, schedule

    def inst(iid, backend, frontend):
        return TaskInstance.of(
            {
                "instance_id": iid,
                "fail_to_pass": {"backend": backend, "frontend": frontend},
                "pass_to_pass": {"backend": [], "frontend": []},
            }
        )

    instances = [
        inst("small", ["tests/a.py::t"], []),
        inst("two-files", ["tests/a.py::t", "tests/b.py::t"], []),
        inst("frontend", [], ["tests/x.spec.ts:1:1 › t"]),
        inst("fullstack", ["tests/a.py::t"], ["tests/x.spec.ts:1:1 › t"]),
        inst("unpredicted", ["tests/a.py::t", "tests/b.py::t", "tests/c.py::t"], []),
    ]
    preds = {i.instance_id: object() for i in instances if i.instance_id != "unpredicted"}
    plan = RunPlan("r", "m", "2025-06-01", Path("/nonexistent"), instances, preds)
    assert schedule(plan) == ["fullstack", "frontend", "two-files", "small"]
