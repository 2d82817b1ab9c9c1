"""Shared Docker-backed fixtures: the demo source, its repository, and one curated demo season."""

from __future__ import annotations

import json
import os
import time
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
