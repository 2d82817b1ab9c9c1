"""Operations: Prefect deployments against a local Prefect server, and the Dask fan-out (issue 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from prefect_kit import prefect_cli as _prefect

from tasks_lib.sources.demo_repo import DEMO_PRS

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BUGFIX = f"prototypebench__demo-fullstack-{DEMO_PRS['bugfix']}"


def test_deployments_run_on_a_local_prefect_server(curated_demo, prefect_server):
    """`prefect deploy --all` registers both deployments (the curation one with its cron schedule); the
    project's setup creates the global concurrency limits; a worker runs an evaluation with small parameters."""
    env = prefect_server
    res = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "limits", "--docker-slots", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0 and "pbench-docker-" in res.stdout and "pbench-github-api" in res.stdout, (
        res.stderr
    )
    _prefect(["work-pool", "create", "pbench-process", "--type", "process"], env)
    _prefect(["deploy", "--all", "--no-prompt"], env)
    listed = _prefect(["deployment", "ls"], env)
    assert "curation-season/demo" in listed and "evaluate-model/evaluate-model" in listed
    assert "curation-season/mcp-context-forge" in listed
    template = _prefect(["deployment", "inspect", "curation-season/template"], env)
    assert "0 3 1 * *" in template and "ENQUEUE" in template

    _prefect(
        [
            "deployment",
            "run",
            "evaluate-model/evaluate-model",
            "-p",
            "predictions=gold",
            "-p",
            "model=deployed",
            "-p",
            "model_cutoff=2025-06-01",
            "-p",
            "run_id=deployed-run",
            "-p",
            f'ids=["{BUGFIX}"]',
        ],
        env,
    )
    _prefect(["worker", "start", "--pool", "pbench-process", "--run-once"], env, timeout=600)
    out = Path(os.environ["PBENCH_OUTPUT_DIR"]) / "runs" / "deployed-run"
    df = pd.read_parquet(out / "results.parquet")
    assert list(df["instance_id"]) == [BUGFIX] and df["resolved"].all()


def test_a_deployment_run_of_a_season_leaves_the_cli_nothing_to_do(
    base_images, prefect_server, container_counter, tmp_path
):
    """A worker runs the demo season's deployment (one PR) with a fresh cache: it extracts, in containers;
    `pbench curate --season demo` afterwards, on the same project settings, finds every extraction cached and
    creates no container (the Docker daemon's own events)."""
    env = {
        **prefect_server,
        "PBENCH_CACHE_DIR": str(tmp_path / "cache"),
        "PBENCH_OUTPUT_DIR": str(tmp_path / "out"),
    }
    env.pop("PREFECT_LOCAL_STORAGE_PATH", None)  # the worker's flow runs get no such setting from the CLI
    _prefect(["work-pool", "create", "pbench-process", "--type", "process"], env)
    _prefect(["deploy", "--all", "--no-prompt"], env)
    _prefect(["deployment", "run", "curation-season/demo", "-p", "limit=1"], env)
    with container_counter() as deployed:
        _prefect(["worker", "start", "--pool", "pbench-process", "--run-once"], env, timeout=900)
    season = tmp_path / "out" / "seasons" / "demo"
    first = pd.read_parquet(season / "extraction.parquet")
    assert len(first) == 1 and first["status"].tolist() == ["ok"], first.to_dict("records")
    assert deployed.created, "the deployment run should have extracted in containers (a cold cache)"

    with container_counter() as cli:
        res = subprocess.run(
            [sys.executable, "-m", "cli.pbench", "curate", "--season", "demo", "--limit", "1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert cli.created == []
    again = pd.read_parquet(season / "extraction.parquet")
    assert again.drop(columns=["duration_s"], errors="ignore").equals(
        first.drop(columns=["duration_s"], errors="ignore")
    )


def test_dask_fan_out_with_two_workers(curated_demo, monkeypatch, tmp_path):
    """The evaluation fan-out runs on a local Dask cluster of two worker processes, each driving the Docker
    engine itself; results land in the shared output folder and match the threaded run (gold resolves all)."""
    from flows.evaluation import run_evaluation

    # A fresh verdict cache, so that the workers really run containers instead of reading cached verdicts.
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    report = run_evaluation(
        dask_workers=2,
        dataset="demo",
        predictions="gold",
        model="dask",
        model_cutoff="2025-06-01",
        run_id="dask-two-workers",
    )
    assert report["resolved"] == report["total"] >= 4
    df = pd.read_parquet(Path(report["out_dir"]) / "results.parquet")
    assert not df["cached"].any()
    workers = set(df["executed_by"])
    assert len(workers) == 2 and str(os.getpid()) not in {w.split(":")[1] for w in workers}
