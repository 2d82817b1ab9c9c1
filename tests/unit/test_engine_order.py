"""The order of one engine run's Docker steps (fakes in place of the daemon): the services start first and are
awaited only just before a container that runs repository code starts, so that taking the snapshot and
creating and filling the side's containers overlap the database's start-up; nothing of the repository runs
before the services answer; a service that never answers is infrastructure and nothing starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks_lib import images
from tasks_lib.constants import Blame, RunStatus, Side
from tasks_lib.engine import run, services
from tasks_lib.engine.records import RunRequest
from tasks_lib.sources import load_source


class FakeContainer:
    def __init__(self, events: list, name: str):
        self.events, self.name = events, name

    def put_archive(self, path, data):
        self.events.append(f"fill {self.name}")

    def start(self):
        self.events.append(f"start {self.name}")

    def kill(self):
        pass


class FakeStack:
    def __init__(self, events: list):
        self.events, self.containers = events, []

    def create_network(self):
        self.events.append("network")

    def sandbox(self, image, role, env, settings, aliases=None):
        self.events.append(f"create {role}")
        container = FakeContainer(self.events, role)
        self.containers.append(container)
        return container

    def close(self):
        self.events.append("close")


@pytest.fixture
def fake_engine(monkeypatch, tmp_path):
    events: list[str] = []
    ref = images.ImageRef(tag="pbench/env:x", id="sha256:x", key="x", built=False)
    spec = SimpleNamespace(lock_sha="sha256:x")
    monkeypatch.setattr(run, "env_images", lambda request, settings: (ref, ref, spec))
    monkeypatch.setattr(run.docker_client, "get", lambda: None)
    monkeypatch.setattr(run, "Stack", lambda client, run_id: FakeStack(events))
    monkeypatch.setattr(run.gitops, "snapshot", lambda repo, commit: (events.append("snapshot") or b"", []))
    monkeypatch.setattr(run, "_wait", lambda *a, **k: 0)
    monkeypatch.setattr(run, "copy_logs", lambda *a, **k: None)
    monkeypatch.setattr(run, "extract_out", lambda *a, **k: None)
    monkeypatch.setattr(run.results, "reader_for", lambda runner: lambda *a, **k: None)
    monkeypatch.setattr(run.services, "wait_for_http", lambda *a, **k: events.append("backend answers"))
    return events


def _launch(events, fail=False):
    def launch(stack, source, settings, deadline, **_):
        events.append("services started")

        def ready():
            events.append("services awaited")
            if fail:
                raise services.ServiceTimeout("postgres did not become ready")

        return {"POSTGRES_SERVER": "db"}, ready

    return launch


@pytest.mark.parametrize("side", [Side.BACKEND, Side.FRONTEND])
def test_containers_are_created_and_filled_while_the_services_start_and_start_after(
    fake_engine, monkeypatch, tmp_path, side
):
    events = fake_engine
    monkeypatch.setattr(run.services, "launch_services", _launch(events))
    source = load_source("demo")
    result = run._run_tests(
        RunRequest(source, tmp_path, "c0ffee", tmp_path / "log", side=side), run.Settings.from_env()
    )
    assert events.index("services started") < events.index("snapshot")
    first_start = min(i for i, e in enumerate(events) if e.startswith("start "))
    assert events.index("services awaited") < first_start  # no repository code before the services answer
    assert events.index("services awaited") > events.index(
        "fill backend" if side == Side.FRONTEND else "fill tests"
    )
    assert events[-1] == "close" and "services_s" in result.timings


def test_a_service_that_never_answers_starts_nothing_and_is_the_harness(fake_engine, monkeypatch, tmp_path):
    events = fake_engine
    monkeypatch.setattr(run.services, "launch_services", _launch(events, fail=True))
    source = load_source("demo")
    result = run._run_tests(RunRequest(source, tmp_path, "c0ffee", tmp_path / "log"), run.Settings.from_env())
    assert not any(e.startswith("start ") for e in events)
    assert result.status == RunStatus.INFRA_ERROR and result.blame == Blame.HARNESS
    assert events[-1] == "close"
