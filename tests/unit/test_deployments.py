"""Deployments run what the CLI runs: one per season with a queueing concurrency limit of 1, parameters the
flows accept; the flows bound their own concurrency; one run of a season at a time on its folder."""

from __future__ import annotations

import inspect
import multiprocessing
import threading
import time
from pathlib import Path

import pytest
import yaml

from flows.agents import agent_run
from flows.curation import curation_season
from flows.evaluation import evaluate_model
from tasks_lib.core import stopping
from tasks_lib.curation import plan as season_plan
from tasks_lib.curation.season import load_season

ROOT = Path(__file__).resolve().parents[2]
FLOWS = {
    "flows/curation.py:curation_season": curation_season,
    "flows/evaluation.py:evaluate_model": evaluate_model,
    "flows/agents.py:agent_run": agent_run,
}


def _deployments() -> list[dict]:
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


def test_every_season_has_a_deployment_that_queues_a_second_run():
    seasons = sorted(p.stem for p in (ROOT / "data" / "season_defs").glob("*.toml"))
    by_season = {
        d["parameters"]["season"]: d for d in _deployments() if d["entrypoint"].endswith(":curation_season")
    }
    assert sorted(by_season) == seasons
    for name, dep in by_season.items():
        assert dep["name"] == name
        assert dep["concurrency_limit"] == {"limit": 1, "collision_strategy": "ENQUEUE"}, name


def test_deployment_parameters_are_ones_the_flows_accept():
    for dep in _deployments():
        fn = FLOWS[dep["entrypoint"]].fn
        accepted = set(inspect.signature(fn).parameters)
        assert set(dep["parameters"]) <= accepted, (dep["name"], set(dep["parameters"]) - accepted)
        assert dep["work_pool"]["name"] == "pbench-process"


def _hold(season_name: str, out: str, ready, release) -> None:
    import os

    os.environ["PBENCH_OUTPUT_DIR"] = out
    with season_plan.season_lock(load_season(season_name)):
        ready.set()
        release.wait(30)


def test_a_second_run_of_a_season_waits_for_the_first(tmp_path, monkeypatch):
    """Rule: the season's folder is locked for the whole run (a kernel lock: a dead run releases it); a second
    run says who holds it and waits, and a stop asked for while it waits ends the wait."""
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path))
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=("demo", str(tmp_path), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        said: list[str] = []
        got = threading.Event()

        def second():
            with season_plan.season_lock(load_season("demo"), said.append):
                got.set()

        t = threading.Thread(target=second)
        t.start()
        time.sleep(3)
        assert not got.is_set()
        assert said and "season demo is being curated by pid" in said[0] and str(holder.pid) in said[0]
        release.set()
        t.join(30)
        assert got.is_set()
    finally:
        release.set()
        holder.join(30)

    # a stop while waiting
    ready2, release2 = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=("demo", str(tmp_path), ready2, release2))
    holder.start()
    try:
        assert ready2.wait(60)
        stopping.request_stop()
        with pytest.raises(stopping.Interrupted), season_plan.season_lock(load_season("demo")):
            pass
    finally:
        stopping.reset()
        release2.set()
        holder.join(30)


@pytest.mark.slow
def test_the_flow_not_the_task_runner_bounds_concurrency():
    """Rule: under a task runner with 8 threads (what a deployment's default may be), `windowed` keeps at most
    `limit` task runs in flight, and every item is yielded once."""
    from prefect import flow, task
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.runners import windowed

    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    @task
    def work(i: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return i

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=8))
    def fan_out() -> list[int]:
        return [fut.result() for _, fut in windowed(range(10), work.submit, 2)]

    assert sorted(fan_out()) == list(range(10))
    assert state["peak"] == 2


def test_the_flows_thread_pool_keeps_no_record_of_finished_task_runs():
    """Prefect's thread pool keeps a cancel event per task run until the flow ends (an Event, its Condition,
    lock and deque: what the memory benchmark saw grow per instance); the flows' pool drops each one when its
    task finishes."""
    import time

    from prefect import task

    from flows.runners import lean_thread_pool

    @task
    def noop(i: int) -> None:
        return None

    # Outside a flow, the first task runs of both worker threads would start Prefect's ephemeral server at
    # once: its start() marks the server running before the process exists, so the second thread finds it
    # "running" with no process and fails ("Server process did not start"; seen here under load, 2 of 3
    # runs side by side). A flow starts it in its own thread first; so does this test.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.api_healthcheck()

    runner = lean_thread_pool(2)
    with runner:
        futures = [runner.submit(noop, {"i": i}) for i in range(20)]
        for fut in futures:
            fut.wait()
        deadline = time.monotonic() + 10
        while runner._cancel_events and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runner._cancel_events == {}
