"""Shared Docker-backed fixtures: the demo source, its repository, one curated demo season, a Prefect server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tasks_lib.core.constants import LABEL_OWNER


@pytest.fixture(scope="session")
def demo_source():
    from tasks_lib.sources.record import load_source

    return load_source("demo")


@pytest.fixture(scope="session")
def demo_repo(demo_source):
    from tasks_lib.sources import repos

    return repos.repo_dir(demo_source)


@pytest.fixture(scope="session")
def demo_prs(demo_repo):
    from tasks_lib.sources.demo_repo import demo_prs_path, ensure_demo_repo

    rows = [json.loads(line) for line in demo_prs_path(ensure_demo_repo()).read_text().splitlines()]
    return {r["number"]: r for r in rows}


class ContainerCounter:
    """Counts containers the engine created between two instants, from the Docker daemon's own events."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        # Events are second-resolution and `since` is inclusive: the window opens at the next whole second, after
        # a settle, so a create sent just before (a killed process's request still in the daemon) stays out of it.
        time.sleep(1)
        self.since = int(time.time()) + 1
        time.sleep(self.since - time.time() + 0.05)
        return self

    def __exit__(self, *exc):
        time.sleep(1)
        until = int(time.time()) + 1
        events = self.client.events(
            since=self.since,
            until=until,
            decode=True,
            filters={
                "type": "container",
                "event": "create",
                "label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}",
            },
        )
        self.created = [e.get("Actor", {}).get("Attributes", {}).get("name") for e in events]
        return False


@pytest.fixture
def container_counter(docker_engine):
    return lambda: ContainerCounter(docker_engine)


@pytest.fixture(scope="session")
def curated_demo(docker_engine, base_images):
    """The demo season, curated once for the whole session through the real Prefect flow and engine."""
    from flows.curation import run_curation
    from tasks_lib.core import paths

    summary = run_curation("demo")
    return {"summary": summary["demo"], "out": Path(paths.seasons_dir() / "demo")}


@pytest.fixture
def no_validator(monkeypatch):
    """Switch the host-side validator off: what follows is the container's defence alone."""
    from tasks_lib.judge import evaluation

    monkeypatch.setattr(evaluation.patches, "validate_patch", lambda *a, **k: [])


@pytest.fixture(scope="module")
def frontend(curated_demo):
    """The demo's frontend-only instance, for attacks on it (attack_kit.Task)."""
    from attack_kit import FRONTEND, Task

    return Task(FRONTEND)


@pytest.fixture(scope="module")
def fullstack(curated_demo):
    """The demo's fullstack instance, for attacks on it (attack_kit.Task)."""
    from attack_kit import FULLSTACK, Task

    return Task(FULLSTACK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefect_server(tmp_path):
    """A real local Prefect server (not the ephemeral one), with its own database."""
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                time.sleep(1)
        else:
            pytest.fail("the Prefect server did not come up in 120 s")
        yield {**env, "PREFECT_API_URL": url, "PBENCH_PROJECT_DIR": str(Path(__file__).resolve().parents[2])}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
