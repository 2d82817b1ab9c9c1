"""Evaluation on the curated demo corpus through Prefect and the real engine (issue 4 must-shows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_kit import pbench_without_prefect

from tasks_lib.sources.demo_repo import DEMO_PRS

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BUGFIX = f"prototypebench__demo-fullstack-{DEMO_PRS['bugfix']}"


def _instances():
    from tasks_lib.corpus import load as corpus

    return {i["instance_id"]: i for i in corpus.load_corpus("demo")}


def _evaluate(predictions, model, run_id, **kw):
    from flows.evaluation import run_evaluation

    return run_evaluation(
        max_workers=2,
        dataset="demo",
        predictions=predictions,
        model=model,
        model_cutoff="2025-06-01",
        run_id=run_id,
        **kw,
    )


def _wrong(patch: str) -> str:
    assert '"Item not found"' in patch
    return patch.replace('"Item not found"', '"Missing"')


def _never_scored(patch: str) -> str:
    """A wrong fix that no other test of this module scores (so never in the verdict cache)."""
    assert '"Item not found"' in patch
    return patch.replace('"Item not found"', '"Not probed before"')


def _cheat(inst: dict) -> str:
    """The wrong fix plus an edit of the hidden test's expectation, so that the edited test would pass."""
    edit = inst["test_patch"].replace('{"detail": "Item not found"}', '{"detail": "Missing"}')
    return _wrong(inst["patch"]) + edit


@pytest.fixture(scope="module")
def gold_run(curated_demo):
    return _evaluate("gold", "gold", "gold-first")


def test_gold_resolves_everything_and_empty_nothing(gold_run, curated_demo):
    """The harness self-test: the reference patches resolve 100 %, the empty patch 0 %."""
    assert gold_run["total"] == gold_run["resolved"] >= 6
    assert {"backend_only", "frontend_only", "fullstack"} <= set(gold_run["by_stack_domain"])
    empty = _evaluate("empty", "empty", "empty-run")
    assert empty["resolved"] == 0 and empty["infra_failures"] == 0
    for domain in ("frontend_only", "fullstack"):
        assert empty["by_stack_domain"][domain]["resolved"] == 0
    assert set(empty["by_status"]) <= {"tests_failed", "test_collection_failed"}


def test_results_parquet_has_the_documented_dtypes(gold_run):
    """Analysts load results.parquet / tests.parquet with pandas and get the documented dtypes."""
    from tasks_lib.judge import reporting

    out = gold_run["out_dir"]
    df = pd.read_parquet(f"{out}/results.parquet")
    assert list(df.columns) == reporting.RESULTS_SCHEMA.names
    assert df["resolved"].dtype == bool and df["f2p_total"].dtype == "int64"
    assert str(df["created_at"].dtype).startswith("datetime64") and df["duration_s"].dtype == "float64"
    tests = pd.read_parquet(f"{out}/tests.parquet")
    assert list(tests.columns) == reporting.TESTS_SCHEMA.names and tests["passed"].all()
    with open(f"{out}/report.json") as fh:
        report = json.load(fh)
    assert report["model"] == "gold" and report["model_cutoff"] == "2025-06-01"
    assert {"before_model_cutoff", "after_model_cutoff"} & set(report["by_contamination"])
    assert os.path.exists(f"{out}/logs/{BUGFIX}/backend/junit.xml")
    # The run's charts, in its folder and as a Prefect artifact with the PNGs inline.
    assert os.path.getsize(f"{out}/charts/rates.png") > 0 and os.path.getsize(f"{out}/charts/grid.png") > 0
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["charts-gold-first"]))
        )
    assert found and "data:image/png;base64," in found[0].data


def test_rerun_starts_no_container_and_one_changed_patch_reruns_one_instance(
    gold_run, container_counter, tmp_path
):
    """Verdicts are cached by content, not run id: the same predictions start nothing; changing one patch
    reruns that instance only (one database + one test container)."""
    instances = _instances()
    with container_counter() as counted:
        again = _evaluate("gold", "gold", "gold-second")
    assert counted.created == [] and again["resolved"] == again["total"]
    cached = pd.read_parquet(f"{again['out_dir']}/results.parquet")["cached"]
    assert cached.all()

    preds = tmp_path / "one-changed.jsonl"
    preds.write_text(
        "".join(
            json.dumps(
                {
                    "instance_id": iid,
                    "model_name_or_path": "m",
                    "model_patch": _wrong(inst["patch"]) if iid == BUGFIX else inst["patch"],
                }
            )
            + "\n"
            for iid, inst in instances.items()
        )
    )
    with container_counter() as counted:
        changed = _evaluate(str(preds), "m", "one-changed")
    df = pd.read_parquet(f"{changed['out_dir']}/results.parquet").set_index("instance_id")
    assert list(df.index[~df["cached"]]) == [BUGFIX]
    assert len(counted.created) == 2, counted.created
    assert df.loc[BUGFIX, "status"] == "tests_failed" and not df.loc[BUGFIX, "resolved"]
    assert df.drop(index=BUGFIX)["resolved"].all()


def test_a_command_whose_verdicts_are_all_cached_never_starts_prefect(gold_run, container_counter, tmp_path):
    """`pbench evaluate` decides cache hits before any server: with the Prefect API pointed at a closed port
    (any use of it would fail), the rerun of the gold predictions writes the same outputs from the verdict
    cache; a run with one changed patch is not answered there, and probing it builds and starts nothing."""
    from tasks_lib.judge import runs

    with container_counter() as counted:
        res = pbench_without_prefect(
            *("evaluate", "--predictions", "gold", "--model", "gold", "--model-cutoff", "2025-06-01"),
            *("--dataset", "demo", "--run-id", "gold-no-prefect", "--json"),
        )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Prefect not started" in res.stderr
    report = json.loads(res.stdout)
    assert report["resolved"] == report["total"] == gold_run["total"]
    assert counted.created == []
    df = pd.read_parquet(f"{report['out_dir']}/results.parquet")
    first = pd.read_parquet(f"{gold_run['out_dir']}/results.parquet")
    assert df["cached"].all() and sorted(df["instance_id"]) == sorted(first["instance_id"])
    assert (df.set_index("instance_id")["status"] == first.set_index("instance_id")["status"]).all()
    assert not os.path.exists(f"{report['out_dir']}/charts")  # drawn by the flow for its artifact only

    instances = _instances()
    preds = tmp_path / "changed.jsonl"
    preds.write_text(
        "".join(
            json.dumps(
                {"instance_id": iid, "model_name_or_path": "m", "model_patch": _never_scored(inst["patch"])}
            )
            + "\n"
            for iid, inst in instances.items()
            if iid == BUGFIX
        )
    )
    plan = runs.plan_run("demo", str(preds), "m", "2025-06-01", "probe-only")
    with container_counter() as counted:
        assert runs.answer_from_cache(plan) is None
    assert counted.created == []


def test_validate_no_cache_scores_again_and_the_normal_command_does_not(gold_run, container_counter):
    """`pbench validate` on a fully cached selection is answered from the verdict cache (no container, Prefect
    never started); with `--no-cache` it scores every instance again (the daemon sees containers created, the
    rows are not `cached`) and still writes the fresh verdicts, so that the next normal command is cached."""
    select = ("validate", "--dataset", "demo", "--id", BUGFIX)
    first = subprocess.run(
        [sys.executable, "-m", "cli.pbench", *select], capture_output=True, text=True, timeout=900
    )
    assert first.returncode == 0, first.stderr[-3000:]
    with container_counter() as counted:
        cached = pbench_without_prefect(*select)
    assert cached.returncode == 0 and "self-test passed" in cached.stderr, cached.stderr[-3000:]
    assert counted.created == [] and "Prefect not started" in cached.stderr
    with container_counter() as counted:
        fresh = subprocess.run(
            [sys.executable, "-m", "cli.pbench", *select, "--no-cache"],
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert fresh.returncode == 0 and "self-test passed" in fresh.stderr, fresh.stderr[-3000:]
    assert len(counted.created) >= 2, counted.created  # gold and empty: a test container each at least
    assert not _rows_of_latest("self-test-gold")["cached"].any()
    assert not _rows_of_latest("self-test-empty")["cached"].any()
    with container_counter() as counted:
        again = pbench_without_prefect(*select)
    assert again.returncode == 0 and counted.created == [], again.stderr[-3000:]
    assert _rows_of_latest("self-test-gold")["cached"].all()


def _rows_of_latest(model: str) -> pd.DataFrame:
    """results.parquet of the newest run of `model` that scored exactly the bugfix instance."""
    from tasks_lib.core import paths

    runs_ = sorted(paths.runs_dir().glob(f"{model}-*/results.parquet"), key=lambda p: p.stat().st_mtime)
    for path in reversed(runs_):
        df = pd.read_parquet(path)
        if list(df["instance_id"]) == [BUGFIX]:
            return df
    raise AssertionError(f"no run of {model} on {BUGFIX} alone")


def _score(iid, patch, tmp_path):
    env = {k: v for k, v in os.environ.items()}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.pbench",
            "score",
            iid,
            "--patch",
            patch,
            "--out",
            str(tmp_path / "score"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_score_exit_codes(gold_run, tmp_path):
    """`pbench score`: 0 resolved, 1 not resolved (a wrong patch is tests_failed), 2 malformed input."""
    inst = _instances()[BUGFIX]
    wrong = tmp_path / "wrong.diff"
    wrong.write_text(_wrong(inst["patch"]))
    malformed = tmp_path / "malformed.diff"
    malformed.write_text(
        "diff --git a/../../etc/passwd b/../../etc/passwd\n--- a/../../etc/passwd\n"
        "+++ b/../../etc/passwd\n@@ -1 +1 @@\n-root\n+toor\n"
    )
    assert _score(BUGFIX, "gold", tmp_path).returncode == 0
    res = _score(BUGFIX, str(wrong), tmp_path)
    assert res.returncode == 1 and "tests_failed" in res.stderr
    res = _score(BUGFIX, str(malformed), tmp_path)
    assert res.returncode == 2 and "patch_invalid" in res.stderr and ".." in res.stderr
    res = _score(BUGFIX, str(tmp_path / "nope.diff"), tmp_path)
    assert res.returncode == 2 and "no such file" in " ".join(res.stderr.split())


def test_patch_that_edits_a_test_to_pass_is_not_resolved(gold_run, tmp_path):
    """A patch that edits the hidden test is `patch_touches_tests`, never resolved; and even when the edit
    reached a container, the engine restores test files before the forced test patch."""
    inst = _instances()[BUGFIX]
    preds = tmp_path / "cheat.json"
    preds.write_text(
        json.dumps([{"instance_id": BUGFIX, "model_name_or_path": "cheater", "model_patch": _cheat(inst)}])
    )
    rep = _evaluate(str(preds), "cheater", "cheater-run", ids=[BUGFIX])
    assert rep["resolved"] == 0
    assert rep["instances"][BUGFIX] == "patch_touches_tests"


def test_predictions_for_half_the_corpus_score_over_the_whole_corpus(gold_run, tmp_path):
    """Issue 18: the denominator is the selected corpus. Gold patches for half of the demo: score = resolved /
    every instance, the other half `no_prediction` (unresolved, no container), listed as SWE-bench does."""
    instances = _instances()
    ids = sorted(instances)
    half, rest = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    preds = tmp_path / "half.jsonl"
    preds.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": "half", "model_patch": instances[i]["patch"]})
            + "\n"
            for i in half
        )
    )
    rep = _evaluate(str(preds), "half", "half-run")
    assert rep["total"] == rep["total_instances"] == len(ids)
    assert rep["resolved"] == len(half) and rep["score"] == round(len(half) / len(ids), 4)
    assert rep["incomplete_ids"] == rest and rep["resolved_ids"] == half
    assert rep["submitted_ids"] == half and rep["error_ids"] == [] and rep["unresolved_ids"] == []
    assert {rep["instances"][i] for i in rest} == {"no_prediction"}
    text = Path(rep["out_dir"], "report.txt").read_text()
    assert f"score {100 * len(half) / len(ids):.1f}%" in text and rest[0] in text
    df = pd.read_parquet(f"{rep['out_dir']}/results.parquet").set_index("instance_id")
    assert not df.loc[rest, "resolved"].any() and set(df.loc[rest, "status"]) == {"no_prediction"}


def _bootstrap_by_enumeration(diffs: list[int]) -> list[float]:
    """The percentile bootstrap of the mean paired difference by brute force: all n**n ordered resamples."""
    import itertools

    import numpy as np

    means = np.array(list(itertools.product(diffs, repeat=len(diffs))), dtype=float).mean(axis=1)
    return [float(np.quantile(means, q, method="inverted_cdf")) for q in (0.025, 0.975)]


def test_compare_of_the_demos_gold_empty_and_half_gold_runs(gold_run, tmp_path):
    """Issue 39, item 7 (must show): `pbench compare` over real runs of the demo, gold, empty and gold patches
    for every other instance (the rest no_prediction), from their folders: the flipped lists are exactly the
    instances one run resolves and the other does not, McNemar's p-value is scipy's exact binomial test over
    the flips, each score's interval scipy's Wilson interval, the difference's interval the bootstrap with
    every resample of the six pairs enumerated."""
    from scipy import stats

    instances = _instances()
    ids = sorted(instances)
    assert len(ids) <= 7  # the reference enumerates n**n resamples
    half = ids[::2]
    preds = tmp_path / "every-other.jsonl"
    preds.write_text(
        "".join(
            json.dumps({"instance_id": i, "model_name_or_path": "half", "model_patch": instances[i]["patch"]})
            + "\n"
            for i in half
        )
    )
    runs = {
        "gold": gold_run,
        "empty": _evaluate("empty", "empty", "compare-empty"),
        "half": _evaluate(str(preds), "half", "compare-half"),
    }
    known = {"gold": set(ids), "empty": set(), "half": set(half)}
    for name, rep in runs.items():
        assert set(rep["resolved_ids"]) == known[name], name
    for a, b in (("empty", "gold"), ("half", "gold"), ("gold", "half"), ("empty", "half")):
        res = subprocess.run(
            [sys.executable, "-m", "cli.pbench", "compare", runs[a]["out_dir"], runs[b]["out_dir"], "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        a_only, b_only = sorted(known[a] - known[b]), sorted(known[b] - known[a])
        assert (out["resolved_by_a_only"], out["resolved_by_b_only"]) == (a_only, b_only), (a, b)
        flips = len(a_only) + len(b_only)
        assert out["mcnemar_p"] == pytest.approx(stats.binomtest(len(a_only), flips, 0.5).pvalue, abs=1e-12)
        diffs = [(i in known[b]) - (i in known[a]) for i in ids]
        assert out["difference_interval"] == pytest.approx(_bootstrap_by_enumeration(diffs), abs=1e-12)
        for k, interval in zip(out["resolved"], out["score_interval"], strict=True):
            ref = stats.binomtest(k, len(ids)).proportion_ci(0.95, method="wilson")
            assert interval == pytest.approx([ref.low, ref.high], abs=1e-9)


def test_a_prediction_of_another_model_is_refused_naming_both(curated_demo, tmp_path):
    from tasks_lib.core.errors import InputError

    inst = _instances()[BUGFIX]
    preds = tmp_path / "other.jsonl"
    preds.write_text(
        json.dumps({"instance_id": BUGFIX, "model_name_or_path": "model-b", "model_patch": inst["patch"]})
    )
    with pytest.raises(InputError) as err:
        _evaluate(str(preds), "model-a", "mismatch-run")
    assert "'model-b'" in str(err.value) and "'model-a'" in str(err.value)


def test_the_swebench_export_of_the_demo_loads_back_and_evaluates(gold_run, tmp_path):
    """Issue 18: `pbench export --format swebench` on the demo season, read by pandas and `datasets` with every
    SWE-bench field, then the flat file through `pbench list/show/evaluate` without a traceback."""
    import datasets

    out = tmp_path / "demo-swebench.jsonl"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.pbench",
            "export",
            "--dataset",
            "demo",
            "--format",
            "swebench",
            "--out",
            str(out),
            "--with-frontend-only",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    df = pd.read_json(out, lines=True, dtype=False).set_index("instance_id")
    instances = _instances()
    assert sorted(df.index) == sorted(instances)
    for iid, inst in instances.items():
        assert json.loads(df.loc[iid, "FAIL_TO_PASS"]) == inst["fail_to_pass"]["backend"]
        assert json.loads(df.loc[iid, "PASS_TO_PASS_FRONTEND"]) == inst["pass_to_pass"]["frontend"]
    hf = tmp_path / "hf"
    res = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "export", "--dataset", "demo", "--out", str(hf)],
        check=True,
        capture_output=True,
        text=True,
    )
    # By default, no free win: the frontend-only instance (no pytest FAIL_TO_PASS) is left out, and said so.
    frontend_only = [iid for iid, i in instances.items() if not i["fail_to_pass"]["backend"]]
    assert frontend_only and all(iid in res.stderr for iid in frontend_only) and "left out" in res.stderr
    ds = datasets.load_from_disk(str(hf))["test"]
    assert ds.num_rows == len(instances) - len(frontend_only)
    assert {"FAIL_TO_PASS", "PASS_TO_PASS", "version"} <= set(ds.column_names)
    for args in (["list", "--dataset", str(out)], ["show", BUGFIX, "--dataset", str(out)]):
        res = subprocess.run([sys.executable, "-m", "cli.pbench", *args], capture_output=True, text=True)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    from flows.evaluation import run_evaluation

    rep = run_evaluation(
        max_workers=2,
        dataset=str(out),
        predictions="gold",
        model="gold",
        model_cutoff="2025-06-01",
        run_id="gold-flat",
    )
    assert rep["resolved"] == rep["total"] == len(instances)
