"""`run_tests`: one side's tests for one task, from images to a read result. Everything is removed afterwards,
also on failure, timeout and interrupt."""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from pathlib import Path

from tasks_lib.core import docker_client, limits, stopping
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import Blame, RunStatus, Side
from tasks_lib.core.errors import ImageBuildError
from tasks_lib.engine import jobs, results, runners, services, staging
from tasks_lib.engine.records import RunRequest, RunResult
from tasks_lib.engine.stack import Stack, copy_logs, extract_out
from tasks_lib.formats import playwright_report
from tasks_lib.images import build as images
from tasks_lib.protocol import wire
from tasks_lib.sources import snapshots

log = logging.getLogger(__name__)

# Files the engine reads after a run: an earlier run's must never stand in for a container that died first.
RESULT_FILES = (
    "result.json",
    "junit.xml",
    "playwright.json",
    "playwright-load-errors.json",
    "run.json",
    "evidence.log",
    "phase",
    "test.log",
)


def run_tests(request: RunRequest, settings: Settings | None = None) -> RunResult:
    """Run one side's tests for one task. Never raises for a task-level problem: the status says it.

    Inside a flow or task run, holds one Docker slot of this host (`limits.docker_slot`) throughout. A run made
    ahead for an equal request (`staging.stage`) is taken over: its containers are started and its runners wait
    for the go, under the slot it was made with.
    """
    settings = settings or Settings.from_env()
    staged = staging.take(request)
    if staged is not None:
        with staged.holding():
            side = staged.side()
            if side is not None:
                try:
                    stopping.check()  # a stop asked for meanwhile: the run made ahead goes too
                except BaseException:
                    side.stack.close()
                    raise
                return _run_tests(request, settings, side)
    with _slot(request.label or "run"):
        return _run_tests(request, settings)


@contextlib.contextmanager
def _slot(label: str):
    """A Docker slot for a run: a free one at once, else, runs made ahead that nobody took removed first (they
    must not hold the slots this run waits for), the next one that frees up."""
    free, fd = limits.free_docker_slot(label)
    if free:
        try:
            yield
        finally:
            limits.release_docker_slot(fd)
        return
    staging.discard()
    with limits.docker_slot(label):
        yield


def env_images(
    request: RunRequest, settings: Settings
) -> tuple[images.ImageRef, images.ImageRef, images.EnvSpec]:
    """The backend image (also the backend-serve container's) and the image of the run's side."""
    chain = [(p.diff, p.untrusted) for p in request.patches]
    if request.specs is not None:
        backend_spec, frontend_spec = request.specs.of(chain, str(request.side))
    else:
        backend_spec, frontend_spec = images.run_env_specs(
            request.source, request.repo, request.commit, chain, str(request.side), settings
        )
    backend_image = images.ensure_env_image(backend_spec, settings)
    if frontend_spec is None:
        return backend_image, backend_image, backend_spec
    return backend_image, images.ensure_env_image(frontend_spec, settings), frontend_spec


def _run_tests(request: RunRequest, settings: Settings, staged: _Side | None = None) -> RunResult:
    stopping.check()  # a stop asked for while this run waited for its Docker slot
    start = time.monotonic()
    timeout = _timeout(request)
    log_dir = Path(request.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in RESULT_FILES:
        (log_dir / stale).unlink(missing_ok=True)
    side = staged
    result = (
        side.result if side is not None else RunResult(status=RunStatus.INFRA_ERROR, log_dir=str(log_dir))
    )
    stack = side.stack if side is not None else Stack(docker_client.get(), uuid.uuid4().hex[:12])
    try:
        if side is None:
            stack.create_network(background=True)  # made while the images are looked up
            side = prepare(request, settings, stack, result, start + timeout)
        else:
            side.go(start + timeout)
        side.trace_jobs()
        _finish_frontend(side) if request.side == Side.FRONTEND else _finish_backend(side)
    except ImageBuildError as exc:
        result.status, result.error, result.blame = RunStatus.IMAGE_BUILD_FAILED, str(exc), Blame.HARNESS
    except services.ServiceTimeout as exc:
        result.status, result.error, result.blame = RunStatus.INFRA_ERROR, str(exc), Blame.HARNESS
    except TimeoutError as exc:  # the backend-serve container never answered: its code had started
        result.status, result.error, result.blame = RunStatus.TIMEOUT, str(exc), Blame.PATCH
    except Exception as exc:  # a Docker failure is infrastructure, never the patch's fault
        result.status, result.blame = RunStatus.INFRA_ERROR, Blame.HARNESS
        result.error = f"{type(exc).__name__}: {exc}"
        log.warning("run %s: infrastructure error: %s", request.label, result.error)
    finally:
        stack.close()
    return finish(result, log_dir, start)


def _timeout(request: RunRequest) -> int:
    side_spec = request.source.frontend if request.side == Side.FRONTEND else request.source.backend
    return request.timeout_s or side_spec.timeout_s


def prepare(
    request: RunRequest, settings: Settings, stack: Stack, result: RunResult, deadline: float, go=False
):
    """A run up to its containers started: images, services launched, the snapshot, the side's containers
    created, filled and started (their runners set the tree up; with `go`, they then wait for the host's go,
    `_Side.go`). Returns the side, for `_finish_backend` / `_finish_frontend`."""
    start = time.monotonic()
    backend_image, image, spec = env_images(request, settings)
    result.image, result.image_id, result.image_built = image.tag, image.id, image.built
    result.lock_sha = spec.lock_sha
    result.timings["image_s"] = round(time.monotonic() - start, 3)
    # The services start while the snapshot is taken and the side's containers are created, filled and
    # started; their runners set the tree up and wait at their gate until the services answer them, so no
    # code of the repository runs before (services_s: the launch plus the host's wait for them; the runner's
    # gate_wait_s: the part of their start still on the run's critical path).
    t0 = time.monotonic()
    launched = services.launch_services(stack, request.source, settings, deadline)
    result.timings["services_s"] = round(time.monotonic() - t0, 3)
    snapshot = snapshots.prepare(request.repo, request.commit)  # made once per commit, then reused
    result.stubbed_files = list(snapshot.stubbed)
    side = _Side(stack, request, settings, deadline, _timeout(request), result, snapshot, launched, go)
    if request.side == Side.FRONTEND:
        _start_frontend(side, backend_image, image)
    else:
        _start_backend(side, image)
    return side


class _Side:
    """What every step of one side's run needs: the stack, the request, the snapshot, the clock, the result
    being written, the services (`ready()` returns once they answer, timed into services_s), and the side's
    containers once started (`tests`, a frontend run's `server`)."""

    def __init__(self, stack, request, settings, deadline, timeout, result, snapshot, launched, go=False):
        self.stack, self.request, self.settings = stack, request, settings
        self.deadline, self.timeout, self.result = deadline, timeout, result
        self.snapshot, self.service_env = snapshot, launched.env
        self.ready = self._timed(launched.ready)
        self.log_dir = Path(request.log_dir)
        self.waits_for_go = go
        self.jobs: list[dict] = []
        self.tests = self.server = None
        self.started = time.monotonic()

    def _timed(self, step):
        def wait() -> None:
            t0 = time.monotonic()
            step()
            timings = self.result.timings
            timings["services_s"] = round(timings["services_s"] + time.monotonic() - t0, 3)

        return wait

    def start(self, image, role: str, env: dict, job: dict, frontend: bool, aliases=None):
        """A sandbox of `job` created, filled (one archive: the job, the tree, its git seed, the tools) and
        started: its runner sets the tree up (unpacked, committed, patched, protected), then waits at its gate
        until what its job awaits answers (`jobs.service_probes`). It may start before the services'
        containers run: the gate's lookups of their names are bounded (containers/runner/pbench_await.py)."""
        job["go"] = self.waits_for_go
        container = self.stack.sandbox(image.tag, role, env, self.settings, aliases=aliases, stdin=job["go"])
        t0 = time.monotonic()
        container.put_archive("/pbench", jobs.archive(self.request, job, frontend, self.snapshot))
        if role == "tests":
            self.jobs.append(job)
            self.result.timings["copy_s"] = round(time.monotonic() - t0, 3)
        container.start()
        return container

    def go(self, deadline: float) -> None:
        """A run made ahead goes on: its clock starts now (`deadline`), its runners are told (the server's
        first)."""
        self.deadline = deadline
        self.result.timings["staged_s"] = round(time.monotonic() - self.started, 3)
        for container in (self.server, self.tests):
            if container is not None:
                self.stack.go(container)

    def trace_jobs(self) -> None:
        """The tests container's job, in the trace folder (written when the run goes, not when it is made:
        the folder is the scoring's, made again for the run)."""
        for job in self.jobs:
            (self.log_dir / "job.json").write_text(jobs.trace(job))


def _start_backend(side: _Side, image) -> None:
    """The tests container starts while the services start; its gate opens once they answer."""
    job = jobs.backend_job(side.request)
    env = jobs.backend_env(side.request.source, side.service_env)
    side.tests = side.start(image, "tests", env, job, False)


def _finish_backend(side: _Side) -> None:
    t0 = time.monotonic()
    side.ready()  # the runner asks the services itself; a service that fails or never answers ends the run here
    _finish_side(side, side.tests, None, t0)


def _start_frontend(side: _Side, backend_image, image) -> None:
    """The backend-serve container and the frontend-tests container both start while the services start and
    set their trees up side by side: the server's gate opens once the services answer, the tests' once the
    server answers (their prestart asks it for its OpenAPI document)."""
    request = side.request
    serve = jobs.serve_job(request)
    backend_env = jobs.backend_env(request.source, side.service_env)
    side.server = side.start(backend_image, "backend", backend_env, serve, False, aliases=["backend"])
    selection = playwright_report.selection_args(request.selection) if request.selection else []
    left_ms = int(max(30.0, side.deadline - time.monotonic() - 60) * 1000)
    job = jobs.frontend_job(request, selection, left_ms)
    side.tests = side.start(image, "tests", jobs.frontend_env(request.source), job, True)


def _finish_frontend(side: _Side) -> None:
    t1 = time.monotonic()
    side.ready()
    if not _serving(side, side.server):
        return
    side.result.timings["backend_serve_s"] = round(time.monotonic() - side.started, 3)
    _finish_side(side, side.tests, side.server, t1)


def _finish_side(side: _Side, container, server, t0: float) -> None:
    """The side's run awaited, its outputs and logs copied to the trace folder, its result read by the reader
    of the runner the source names."""
    request, result, log_dir = side.request, side.result, side.log_dir
    runner_exit = _wait(container, side.deadline, side.timeout, request, result, log_dir)
    result.timings["container_s"] = round(time.monotonic() - t0, 3)

    def keep_log(c) -> None:
        copy_logs(c, log_dir / f"{c.name.rsplit('-', 1)[-1]}.log", tail=200)

    for c in list(side.stack.containers):
        if c is server:
            keep_log(c)
        elif c is not container:  # a service: it goes (its log kept first) while the outputs are copied
            side.stack.retire(c, before=keep_log)
    copy_logs(container, log_dir / "container.log")
    extract_out(container, log_dir, request.output_cap)
    if server is not None:
        extract_out(server, log_dir / "backend-serve", request.output_cap)
    if runner_exit is None:
        result.blame = results.blame_for_stop(log_dir)
        if result.blame == Blame.HARNESS:
            result.status = RunStatus.INFRA_ERROR
            result.error = f"wall-clock timeout of {side.timeout}s before the patch's code started"
        return
    side_spec = request.source.frontend if request.side == Side.FRONTEND else request.source.backend
    runners.get(side_spec.runner).read(
        result, log_dir, runner_exit, frontend_dir=getattr(request.source.frontend, "dir", "")
    )


# How often a waiting run looks at the stop flag: a stop takes effect within this many seconds.
STOP_POLL_S = 2.0


def _wait(container, deadline, timeout, request, result, log_dir) -> int | None:
    """The runner's exit code; None when the wall clock ran out (the container killed). A stop asked for
    meanwhile (tasks_lib.core.stopping) kills the container and raises, within STOP_POLL_S."""
    import requests

    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            return container.wait(timeout=max(0.5, min(STOP_POLL_S, remaining)))["StatusCode"]
        except requests.exceptions.RequestException as exc:  # a read that ran out: this slice is over
            if not isinstance(exc, requests.exceptions.ReadTimeout) and not _read_timeout(exc):
                raise  # the daemon went away: infrastructure
        if stopping.requested():
            with contextlib.suppress(Exception):  # it may have exited meanwhile (409)
                container.kill()
            stopping.check()
    log.info("run %s timed out after %ss", request.label, timeout)
    container.kill()
    result.status = RunStatus.TIMEOUT
    result.error = f"wall-clock timeout of {timeout}s"
    return None


def _read_timeout(exc: Exception) -> bool:
    """urllib3 reports a read that ran out as a ConnectionError wrapping a ReadTimeoutError."""
    return "Read timed out" in str(exc)


def _serving(side: _Side, server) -> bool:
    """Whether the backend-serve container answers (it runs the same snapshot and patch chain, the prestart
    steps, then the server, alias "backend", which the frontend-tests container reaches through a forward on
    localhost). When it does not, the result says why, from what the server's runner wrote."""
    request, result = side.request, side.result
    try:
        services.wait_for_http(server, request.source.backend.serve_port, side.deadline)
        return True
    except (services.ServeFailed, TimeoutError) as exc:
        serve_out = side.log_dir / "backend-serve"
        if isinstance(exc, TimeoutError):
            server.kill()
        extract_out(server, serve_out, request.output_cap)
        (serve_out / "container.log").write_text(str(exc))
        res = wire.read_result(serve_out) or {}
        result.patch_methods = {p["name"]: p["method"] for p in res.get("patches", [])}
        result.tampering += res.get("tampering", [])
        result.blame = results.blame_for_stop(serve_out)
        if res.get("status") == RunStatus.PATCH_APPLY_FAILED:
            result.status = RunStatus.PATCH_APPLY_FAILED
        elif isinstance(exc, TimeoutError):
            result.status = RunStatus.TIMEOUT if result.blame == Blame.PATCH else RunStatus.INFRA_ERROR
        elif res.get("status") == wire.RunnerStatus.OUTPUT_LIMIT:
            result.status = RunStatus.OUTPUT_LIMIT
        else:
            result.status = RunStatus.PRESTART_FAILED
        result.error = f"the backend-serve container did not serve ({type(exc).__name__}; see {serve_out})"
        return False


def finish(result: RunResult, log_dir: Path, start: float) -> RunResult:
    result.timings["total_s"] = round(time.monotonic() - start, 3)
    (log_dir / "run.json").write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    return result
