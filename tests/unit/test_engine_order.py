"""The order of one engine run's Docker steps (fakes in place of the daemon): the services start first; the
snapshot is taken and the side's containers are created, filled and started while the database starts (their
runners set the tree up and wait at their gate until what their job awaits answers them, so nothing of the
repository runs before: pbench_await); nothing is put into a container once it has started; a service that
never answers is infrastructure."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tasks_lib.core.constants import Blame, RunStatus, Side
from tasks_lib.engine import run, services
from tasks_lib.engine.records import RunRequest
from tasks_lib.images import build as images
from tasks_lib.sources.record import load_source


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

    def create_network(self, background=False):
        self.events.append("network")

    def sandbox(self, image, role, env, settings, aliases=None, stdin=False):
        self.events.append(f"create {role}" + (" (stdin open)" if stdin else ""))
        container = FakeContainer(self.events, role)
        self.containers.append(container)
        return container

    def go(self, container):
        self.events.append(f"go {container.name}")

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
    snapshot = SimpleNamespace(stubbed=(), files=dict)
    monkeypatch.setattr(run.snapshots, "prepare", lambda repo, commit: events.append("snapshot") or snapshot)
    monkeypatch.setattr(run, "_wait", lambda *a, **k: 0)
    monkeypatch.setattr(run, "copy_logs", lambda *a, **k: None)
    monkeypatch.setattr(run, "extract_out", lambda *a, **k: None)
    monkeypatch.setattr(run.runners, "get", lambda runner: SimpleNamespace(read=lambda *a, **k: None))
    monkeypatch.setattr(run.services, "wait_for_http", lambda *a, **k: events.append("backend answers"))
    return events


def _launch(events, fail=False):
    def launch(stack, source, settings, deadline, **_):
        events.append("services launched")

        def ready():
            events.append("services awaited")
            if fail:
                raise services.ServiceTimeout("postgres did not become ready")

        return services.Launched({"POSTGRES_SERVER": "db"}, ready)

    return launch


@pytest.mark.parametrize("side", [Side.BACKEND, Side.FRONTEND])
def test_containers_start_while_the_services_start(fake_engine, monkeypatch, tmp_path, side):
    events = fake_engine
    monkeypatch.setattr(run.services, "launch_services", _launch(events))
    source = load_source("demo")
    result = run._run_tests(
        RunRequest(source, tmp_path, "c0ffee", tmp_path / "log", side=side), run.Settings.from_env()
    )
    first = "backend" if side == Side.FRONTEND else "tests"  # the container whose prestart needs the database
    assert events.index("services launched") < events.index("snapshot") < events.index(f"fill {first}")
    # Made, filled and started while the database starts (the runner's gate asks the services itself, its
    # lookups bounded); the host watches the services after.
    assert events.index(f"start {first}") < events.index("services awaited")
    if side == Side.FRONTEND:  # the frontend tests start beside the server
        assert (
            events.index("start tests") < events.index("services awaited") < events.index("backend answers")
        )
    for name in ("tests", "backend") if side == Side.FRONTEND else ("tests",):
        # Filled before it starts, never after: its gate is what its runner asks, not a file from the host.
        assert max(i for i, e in enumerate(events) if e == f"fill {name}") < events.index(f"start {name}")
    assert events[-1] == "close" and "services_s" in result.timings


def test_a_service_that_never_answers_is_the_harness(fake_engine, monkeypatch, tmp_path):
    events = fake_engine
    monkeypatch.setattr(run.services, "launch_services", _launch(events, fail=True))
    source = load_source("demo")
    result = run._run_tests(RunRequest(source, tmp_path, "c0ffee", tmp_path / "log"), run.Settings.from_env())
    assert result.status == RunStatus.INFRA_ERROR and result.blame == Blame.HARNESS
    assert events[-1] == "close"


def test_backend_jobs_await_the_services_and_frontend_jobs_the_backend_server(tmp_path):
    from tasks_lib.engine import jobs

    demo = load_source("demo")
    service = demo.backend.services[0]
    request = RunRequest(demo, tmp_path, "c0ffee", tmp_path / "log")
    postgres = [{"kind": "postgres", "host": "db", "port": 5432, "user": service.user, "db": service.db}]
    assert jobs.backend_job(request)["await"] == postgres
    assert jobs.serve_job(request)["await"] == postgres
    server = {"kind": "http", "url": f"http://backend:{demo.backend.serve_port}/"}
    assert jobs.frontend_job(request, [], 1000)["await"] == [server]  # the backend-serve container's word
    bare = dataclasses.replace(demo, backend=dataclasses.replace(demo.backend, services=()))
    assert jobs.backend_job(RunRequest(bare, tmp_path, "c0ffee", tmp_path / "log"))["await"] == []
    assert "pbench_await.py" in jobs.tool_files(False)  # the runner's probes travel with it


class _SlowDaemon:
    """A docker client whose container creation takes a while, recording what is made and removed."""

    def __init__(self, events: list):
        self.events = events
        self.api = SimpleNamespace(create_endpoint_config=lambda aliases: {"Aliases": aliases})
        self.containers = SimpleNamespace(create=self._container)

    def _container(self, image, name, networking_config, **_):
        import time

        time.sleep(0.3)
        self.events.append(f"create {name} as {networking_config['pbench-r1']['Aliases']}")
        return SimpleNamespace(
            name=name,
            start=lambda: self.events.append(f"start {name}"),
            remove=lambda force, v: self.events.append(f"remove {name}"),
        )


def test_services_made_in_the_background_are_removed_even_when_the_run_ends_first():
    from tasks_lib.engine.stack import Stack

    events: list[str] = []
    stack = Stack(_SlowDaemon(events), "r1")
    stack.network = SimpleNamespace(name="pbench-r1", remove=lambda: events.append("remove network"))
    launched = services.launch_services(stack, load_source("demo"), run.Settings.from_env(), 0, pg_image="pg")
    assert launched.env["POSTGRES_SERVER"] == "db" and events == []  # the environment at once, the rest later
    stack.close()  # e.g. the side's container failed to start before the services were awaited
    assert events[:2] == ["create pbench-r1-db0 as ['db']", "start pbench-r1-db0"]
    assert set(events[2:]) == {"remove pbench-r1-db0", "remove network"}  # its data was on a tmpfs


def test_a_retired_service_goes_in_the_background_after_its_log_and_close_waits_for_it():
    import threading

    from tasks_lib.engine.stack import Stack

    events: list[str] = []
    copied = threading.Event()
    stack = Stack(None, "r2")
    stack.network = SimpleNamespace(name="pbench-r2", remove=lambda: events.append("remove network"))

    def container(name):
        return SimpleNamespace(name=name, remove=lambda force, v: events.append(f"remove {name}"))

    db, tests = container("db0"), container("tests")
    stack.containers += [tests, db]

    def keep_log(c):
        copied.wait(5)  # still copying when the run goes on
        events.append(f"log {c.name}")

    stack.retire(db, before=keep_log)
    assert stack.containers == [tests]  # no longer the close's to remove
    events.append("outputs copied")
    copied.set()
    stack.close()
    assert events.index("outputs copied") < events.index("log db0") < events.index("remove db0")
    assert events.count("remove db0") == 1 and "remove tests" in events
    assert events[-1] == "remove network"


# --------------------------------------------------------------------------- runs made ahead (engine.staging)


def _staged_request(tmp_path, diff="diff --git a/x b/x\n", side=Side.BACKEND):
    from tasks_lib.engine.records import PatchInput

    patches = (PatchInput("agent", diff, untrusted=True), PatchInput("test_patch", ""))
    return RunRequest(load_source("demo"), tmp_path, "c0ffee", tmp_path / "log", patches, side=side)


@pytest.fixture
def staged_engine(fake_engine, monkeypatch):
    from tasks_lib.engine import staging

    monkeypatch.setattr(run.services, "launch_services", _launch(fake_engine))
    monkeypatch.setattr(staging, "Stack", lambda client, run_id: run.Stack(client, run_id))
    monkeypatch.setattr(staging.docker_client, "get", lambda: None)
    yield fake_engine, staging
    staging.discard()


def test_a_run_made_ahead_waits_for_its_go_and_its_clock_starts_then(staged_engine, tmp_path):
    """Rule: a staged run's container is made, filled and started ahead with its standard input open (its
    runner waits there, no code of the repository run); the run of an equal request takes it over and tells it
    to go before waiting for it; the trace folder gets the job when the run goes."""
    events, staging = staged_engine
    request = _staged_request(tmp_path)
    assert staging.stage(request) and not staging.stage(request)  # once per request
    staged = staging._staged[staging.key(request)]
    assert staged.side() is not None
    made = list(events)
    assert "create tests (stdin open)" in made and made.index("fill tests") < made.index("start tests")
    assert not (tmp_path / "log" / "job.json").exists()
    events.clear()
    result = run.run_tests(request)
    assert events.index("go tests") < events.index("services awaited")
    assert not any(e.startswith(("create", "fill", "start")) for e in events)  # nothing made twice
    assert events[-1] == "close" and "staged_s" in result.timings
    assert (tmp_path / "log" / "job.json").exists()
    assert staging.take(request) is None  # taken once


def test_a_run_made_ahead_is_taken_only_by_an_equal_request(staged_engine, tmp_path):
    """Rule: another patch, another selection or a frontend side never takes (or makes) a staged run; what
    nobody took is removed."""
    events, staging = staged_engine
    request = _staged_request(tmp_path)
    assert staging.stage(request)
    assert staging.take(_staged_request(tmp_path, diff="diff --git a/y b/y\n")) is None
    assert staging.take(dataclasses.replace(request, selection=("tests/test_other.py",))) is None
    assert not staging.stage(_staged_request(tmp_path, side=Side.FRONTEND))
    assert staging.key(dataclasses.replace(request, label="other label")) == staging.key(request)
    assert staging.discard() == 1
    assert events[-1] == "close" and staging.take(request) is None


def test_a_run_that_fails_to_be_made_ahead_is_made_again(staged_engine, monkeypatch, tmp_path):
    events, staging = staged_engine
    request = _staged_request(tmp_path)
    real = run.env_images

    def flaky(req, settings):
        flaky.calls += 1
        if flaky.calls == 1:
            raise RuntimeError("daemon hiccup")
        return real(req, settings)

    flaky.calls = 0
    monkeypatch.setattr(run, "env_images", flaky)
    assert staging.stage(request)
    staging._staged[staging.key(request)].future.exception()
    events.clear()
    result = run.run_tests(request)
    assert flaky.calls == 2 and "create tests" in events and "go tests" not in events
    assert "staged_s" not in result.timings


def test_an_evaluation_stages_the_next_instance_only_with_a_spare_slot(monkeypatch):
    """One worker on a host of two Docker slots: each submitted instance has the next one in the schedule made
    ahead; as many workers as slots: nothing is made ahead (the slots are the workers')."""
    from tasks_lib.core import limits
    from tasks_lib.judge import evaluation, runs

    staged = []
    monkeypatch.setattr(evaluation, "stage", lambda instance, *a, **k: staged.append(instance) or True)
    monkeypatch.setattr(limits, "docker_slots", lambda host=None: 2)
    jobs = {i: SimpleNamespace(instance=i, prediction=None, source=None, repo=None, trace=None, no_cache=False)
            for i in ("a", "b", "c")}  # fmt: skip
    plan = SimpleNamespace(jobs=jobs)
    ahead = runs.Ahead(plan, ["c", "a", "b"], workers=1)
    assert ahead.after("c") and ahead.after("a") and not ahead.after("b")
    assert staged == ["a", "b"]
    assert not runs.Ahead(plan, ["c", "a", "b"], workers=2).after("c") and staged == ["a", "b"]


def test_a_stop_asked_for_meanwhile_removes_the_run_made_ahead(staged_engine, tmp_path):
    from tasks_lib.core import stopping

    events, staging = staged_engine
    request = _staged_request(tmp_path)
    assert staging.stage(request)
    staging._staged[staging.key(request)].side()
    stopping.request_stop()
    try:
        with pytest.raises(stopping.Interrupted):
            run.run_tests(request)
    finally:
        stopping.reset()
    assert events[-1] == "close" and "go tests" not in events


def test_a_run_made_ahead_for_another_request_is_kept_while_a_slot_is_free(
    staged_engine, monkeypatch, tmp_path
):
    """A run that has no staged run of its own takes a free slot and leaves the others' alone (a fullstack
    instance's second side must not throw away the next instance's run); with no slot free, they go first."""
    from tasks_lib.core import limits

    events, staging = staged_engine
    ahead = _staged_request(tmp_path)
    assert staging.stage(ahead)
    other = _staged_request(tmp_path, diff="diff --git a/y b/y\n")
    run.run_tests(other)
    assert staging.take(ahead) is not None
    assert staging.stage(other)
    monkeypatch.setattr(limits, "free_docker_slot", lambda label="run": (False, None))
    run.run_tests(ahead)
    assert staging.take(other) is None  # removed to free its slot
