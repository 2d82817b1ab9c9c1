"""An agent plugged in (issue 39 must-show): the scripted stand-in agent evaluated end to end on the curated demo
through the new commands (checkout -> agent -> predictions -> evaluate -> report), and the same as a Prefect
deployment run on a real local server. The agent never sees a reference patch: it gets a checkout and a
statement, and its fixes are its own (tests/stand_ins/scripted_agent.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from prefect_kit import prefect_cli

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SCRIPTED = ROOT / "tests" / "stand_ins" / "scripted_agent.py"
DEMO = "prototypebench__demo-fullstack-"


def _pbench(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        **kw,
    )


def _results(run_id: str) -> dict[str, str]:
    df = pd.read_parquet(Path(os.environ["PBENCH_OUTPUT_DIR"]) / "runs" / run_id / "results.parquet")
    return dict(zip(df["instance_id"], df["status"], strict=True))


def test_the_scripted_agent_end_to_end_through_the_cli(curated_demo, tmp_path):
    """`pbench checkout` gives the agent's starting tree (the base, none of the future); the agent run by hand
    in it and `pbench agent diff` give the very prediction `pbench agent run` writes; `pbench agent run
    --evaluate` runs it over four demo instances and scores them: demo-5 and demo-8 (a new file) resolve,
    demo-3 (a partial fix) does not, demo-12 (the agent gives up, exit 3) leaves an empty prediction, scored
    unresolved; `pbench report` shows the run."""
    instances = {
        i["instance_id"]: i for i in map(json.loads, (curated_demo["out"] / "instances.jsonl").open())
    }
    ids = [f"{DEMO}{n}" for n in (3, 5, 8, 12)]
    assert set(ids) <= set(instances)

    # checkout -> agent (by hand) -> diff
    co = tmp_path / "by-hand"
    res = _pbench("checkout", f"{DEMO}8", str(co), "--statement-file", str(tmp_path / "statement.md"))
    assert res.returncode == 0, res.stderr
    git = lambda *a: subprocess.run(["git", *a], cwd=co, capture_output=True, text=True)  # noqa: E731
    assert git("status", "--porcelain").stdout == "" and git("rev-list", "--all").stdout.count("\n") == 1
    assert git("cat-file", "-e", instances[f"{DEMO}8"]["head_commit"]).returncode != 0
    statement = (tmp_path / "statement.md").read_text()
    assert statement == instances[f"{DEMO}8"]["problem_statement"]
    agent_env = {**os.environ, "PBENCH_INSTANCE_ID": f"{DEMO}8"}
    subprocess.run(
        [sys.executable, str(SCRIPTED)], cwd=co, input=statement, text=True, env=agent_env, check=True
    )
    by_hand = _pbench("agent", "diff", str(co)).stdout
    assert "+++ b/backend/app/slugs.py" in by_hand

    # the batch: agent -> predictions -> evaluate -> report
    preds = tmp_path / "preds.jsonl"
    selection = [arg for iid in ids for arg in ("--id", iid)]
    res = _pbench(
        "agent", "run", "--command", f"{sys.executable} {SCRIPTED}", "--model", "scripted-agent",
        "--out", str(preds), *selection, "--timeout-s", "300", "--evaluate", "--model-cutoff", "2025-06-01",
        "--run-id", "scripted-agent-cli", "--max-workers", "2", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["agents"]["by_outcome"] == {"completed": 3, "failed": 1}
    rows = {r["instance_id"]: r for r in map(json.loads, preds.read_text().splitlines())}
    assert sorted(rows) == sorted(ids) and rows[f"{DEMO}8"]["model_patch"] == by_hand
    assert rows[f"{DEMO}12"]["model_patch"] == ""
    report = out["report"]
    assert report["model"] == "scripted-agent" and report["total"] == 4 and report["resolved"] == 2
    statuses = _results("scripted-agent-cli")
    assert {i for i, s in statuses.items() if s == "resolved"} == {f"{DEMO}5", f"{DEMO}8"}
    assert statuses[f"{DEMO}3"] == statuses[f"{DEMO}12"] == "tests_failed"

    board = _pbench("report", str(Path(report["out_dir"])))
    assert board.returncode == 0 and "scripted-agent" in board.stdout

    # a rerun resumes: nothing to run, the same predictions, the verdicts from the cache
    again = _pbench(
        "agent", "run", "-c", "false", "--model", "scripted-agent", "--out", str(preds), *selection
    )
    assert again.returncode == 0 and "4 instance(s) already in" in again.stderr
    assert {r["instance_id"]: r for r in map(json.loads, preds.read_text().splitlines())} == rows


def test_the_scripted_agent_as_a_deployment_run(curated_demo, prefect_server, tmp_path):
    """`prefect deploy --all` registers `agent-run/agent-run`, whose default is the scripted agent on three demo
    instances; a process worker runs it (agent -> predictions -> the evaluate-model subflow -> report): demo-5
    and demo-8 resolve, demo-3 does not."""
    env = prefect_server
    prefect_cli(["work-pool", "create", "pbench-process", "--type", "process"], env)
    prefect_cli(["deploy", "--all", "--no-prompt"], env)
    shown = prefect_cli(["deployment", "inspect", "agent-run/agent-run"], env)
    assert (
        f"{ROOT}/tests/stand_ins/scripted_agent.py" in shown
    )  # the project folder, filled in at deploy time
    preds = tmp_path / "deployed.jsonl"
    prefect_cli(
        [
            "deployment", "run", "agent-run/agent-run", "-p", f"predictions={preds}",
            "-p", "model_cutoff=2025-06-01", "-p", "run_id=scripted-agent-deployed",
        ],
        env,
    )  # fmt: skip
    prefect_cli(["worker", "start", "--pool", "pbench-process", "--run-once"], env, timeout=1800)
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert sorted(r["instance_id"] for r in rows) == [f"{DEMO}{n}" for n in (3, 5, 8)]
    assert {r["model_name_or_path"] for r in rows} == {"scripted-agent"}
    attempts = (tmp_path / "deployed-agent" / "attempts.jsonl").read_text().splitlines()
    assert {json.loads(a)["outcome"] for a in attempts} == {"completed"}
    statuses = _results("scripted-agent-deployed")
    assert statuses == {f"{DEMO}3": "tests_failed", f"{DEMO}5": "resolved", f"{DEMO}8": "resolved"}
    report = json.loads(
        (
            Path(os.environ["PBENCH_OUTPUT_DIR"]) / "runs" / "scripted-agent-deployed" / "report.json"
        ).read_text()
    )
    assert report["resolved"] == 2 and report["total"] == 3
