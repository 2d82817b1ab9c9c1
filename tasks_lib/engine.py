"""The execution engine shared by curation and evaluation: run one side's tests for one task.

"Different inputs, same machine": extraction and scoring both call `run_tests` with a commit and an
ordered list of patches. Per call: the environment image for the (patched) dependency files, a private
network without a route out, an ephemeral Postgres where the source needs one, and a test container that
applies the patches, runs the prestart steps and the tests. Everything is removed afterwards, also on
failure, timeout and interrupt.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasks_lib import docker_client, gitops, globs, images, junit, limits, paths
from tasks_lib.config import Settings
from tasks_lib.constants import LABEL, LABEL_OWNER, LABEL_RUN, Outcome, RunStatus, Side
from tasks_lib.errors import ImageBuildError, InfraError
from tasks_lib.sources import SourceRecord

log = logging.getLogger(__name__)

# Pinned so that the same patch gets the same verdict: hash seeds, time zone, locale.
PINNED_ENV = {
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/root",
    "CI": "true",
    "PYTHONDONTWRITEBYTECODE": "1",
}
MAX_OUTPUT_BYTES = 256 * 2**20
DB_ALIAS = "db"


@dataclass(frozen=True)
class PatchInput:
    """One patch of the ordered chain. After an untrusted patch, every test file it touched is put back
    to base inside the container, so an edited test can never count."""

    name: str
    diff: str
    untrusted: bool = False


@dataclass(frozen=True)
class RunRequest:
    source: SourceRecord
    repo: Path  # the source's cached bare clone (gitops.repo_dir)
    commit: str
    log_dir: Path
    patches: tuple[PatchInput, ...] = ()
    selection: tuple[str, ...] = ()
    side: Side = Side.BACKEND
    timeout_s: int | None = None
    continue_on_collection_errors: bool = True
    label: str = ""


@dataclass
class RunResult:
    status: RunStatus
    tests: dict[str, Outcome] = field(default_factory=dict)
    suite_ran: bool = False
    collection_errors: list[str] = field(default_factory=list)
    exit_code: int | None = None
    exit_code_mismatch: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    log_dir: str = ""
    image: str = ""
    image_id: str = ""
    image_built: bool = False
    lock_sha: str = ""
    patch_methods: dict[str, str | None] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    # JUnit vs pytest's own summary in the piped output: any disagreement means a report was tampered
    # with (or a harness bug); never a pass.
    report_disagreements: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = str(self.status)
        d["tests"] = {k: str(v) for k, v in self.tests.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunResult:
        d = dict(d)
        d["status"] = RunStatus(d["status"])
        d["tests"] = {k: Outcome(v) for k, v in d["tests"].items()}
        return cls(**d)


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _extract_out(container, dest: Path) -> None:
    """Copy /pbench/out to the host. The container ran untrusted code: only regular files, bounded size."""
    stream, _ = container.get_archive("/pbench/out")
    buf = io.BytesIO()
    for chunk in stream:
        buf.write(chunk)
        if buf.tell() > MAX_OUTPUT_BYTES:
            raise InfraError(f"test output exceeds {MAX_OUTPUT_BYTES} bytes", log_path=dest)
    buf.seek(0)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith("out/")]
        for m in members:
            m.name = m.name[len("out/") :]
        tar.extractall(dest, members=members, filter="data")


class _Stack:
    """Containers, network and volume of one run; `close()` removes all of them, whatever happened."""

    def __init__(self, client, run_id: str):
        self.client = client
        self.run_id = run_id
        self.labels = {LABEL: "1", LABEL_RUN: run_id, LABEL_OWNER: os.environ.get("PBENCH_OWNER", "pbench")}
        self.containers: list = []
        self.network = None
        self.volumes: list = []

    def close(self) -> None:
        for c in reversed(self.containers):
            _remove(f"container {c.name}", lambda c=c: c.remove(force=True, v=True))
        for v in self.volumes:
            _remove(f"volume {v.name}", lambda v=v: v.remove(force=True))
        if self.network is not None:
            _remove(f"network {self.network.name}", self.network.remove)


def _remove(what: str, remove, attempts: int = 3) -> None:
    """Remove one Docker object; a busy daemon (timeouts under load) gets two more tries. What stays is
    logged, and `pbench cleanup` removes it later by label."""
    import docker.errors

    for attempt in range(1, attempts + 1):
        try:
            remove()
            return
        except docker.errors.NotFound:
            return
        except Exception as exc:  # keep removing the rest; report what stays
            if attempt == attempts:
                log.warning("could not remove %s: %s", what, exc)
            else:
                time.sleep(2 * attempt)


def _frontend_job(request: RunRequest, selection: list[str]) -> dict[str, bytes]:
    """The frontend-tests container's job: node_modules linked, the source's prestart, Playwright with the
    harness's config and reporters (the runtime files), on `selection` (Playwright arguments)."""
    fe = request.source.frontend
    runtime = {n: (paths.containers_dir() / "frontend" / n).read_bytes() for n in FRONTEND_RUNTIME_FILES}
    return _job(
        request,
        fe.dir,
        ["pbench-link-node-modules /deps /work/repo", *fe.prestart],
        {"runner": "playwright", "command": "sh /pbench/in/pbench-playwright.sh", "selection": selection},
        runtime,
    )


def _frontend_env(source: SourceRecord, global_timeout_ms: int) -> dict[str, str]:
    """The frontend-tests container's environment: the dev server on localhost, the backend-serve container
    (alias "backend") forwarded to localhost, Playwright's whole-run budget."""
    fe, backend = source.frontend, source.backend
    return {
        **fe.env,
        **PINNED_ENV,
        "PBENCH_OUT": "/pbench/stage",
        "PBENCH_SERVE_COMMAND": fe.serve_command,
        "PBENCH_SERVE_URL": f"http://localhost:{fe.serve_port}",
        "PBENCH_BASE_URL": f"http://localhost:{fe.serve_port}",
        "PBENCH_FORWARD": f"{backend.serve_port}=backend:{backend.serve_port}",
        "PBENCH_BACKEND_URL": f"http://backend:{backend.serve_port}",
        "PBENCH_PW_GLOBAL_TIMEOUT_MS": str(global_timeout_ms),
    }


def _wait_for_postgres(container, service, deadline: float) -> None:
    probe = f"pg_isready -q -h 127.0.0.1 -U {service.user} -d {service.db}"
    while time.monotonic() < deadline:
        container.reload()
        if container.status not in ("created", "running"):
            raise InfraError(
                f"postgres exited during start-up: {container.logs(tail=20).decode(errors='replace')}"
            )
        # Poll inside the container, every 0.1 s for up to 10 s per exec: on a busy machine one exec costs
        # ~0.4 s, which polling from here paid on every try (docs/performance.md).
        tries = 10 * max(1, min(10, int(deadline - time.monotonic())))
        code, _ = container.exec_run(
            ["sh", "-c", f"for i in $(seq {tries}); do {probe} && exit 0; sleep 0.1; done; exit 1"]
        )
        if code == 0:
            return
    raise TimeoutError("postgres did not become ready")


def _start_services(
    stack: _Stack, source: SourceRecord, settings: Settings, deadline: float
) -> dict[str, str]:
    env: dict[str, str] = {}
    services = source.backend.services
    if not services:
        return env
    pg_image = images.bootstrap(settings)["postgres"].tag
    for i, service in enumerate(services):
        volume = stack.client.volumes.create(name=f"pbench-{stack.run_id}-pg{i}", labels=stack.labels)
        stack.volumes.append(volume)
        container = stack.client.containers.create(
            pg_image,
            name=f"pbench-{stack.run_id}-db{i}",
            environment={"PG_USER": service.user, "PG_PASSWORD": service.password, "PG_DB": service.db},
            volumes={volume.name: {"bind": "/var/lib/pbench-pg", "mode": "rw"}},
            labels=stack.labels,
            network=stack.network.name,
            mem_limit="1g",
            pids_limit=512,
        )
        stack.containers.append(container)
        # Alias the first service as "db" on the private network: the tests reach it there and nowhere else.
        stack.network.disconnect(container)
        stack.network.connect(container, aliases=[DB_ALIAS if i == 0 else f"{DB_ALIAS}{i}"])
        container.start()
        _wait_for_postgres(container, service, deadline)
        env.update(service.render_env(DB_ALIAS if i == 0 else f"{DB_ALIAS}{i}", 5432))
    return env


FRONTEND_RUNTIME_FILES = (
    "playwright.pbench.config.mjs",
    "pbench-playwright.sh",
    "pbench-wait-http.mjs",
    "pbench-forward.mjs",
    "pbench-load-errors.mjs",
)


def _job(
    request: RunRequest, workdir: str, prestart: list[str], test: dict, extra: dict[str, bytes] | None = None
) -> dict[str, bytes]:
    """Files for /pbench/in: the runner, the patches, job.json (and per-side run-time helpers)."""
    files: dict[str, bytes] = {
        "pbench_runner.py": (paths.containers_dir() / "runner" / "pbench_runner.py").read_bytes(),
        "pbench_globs.py": Path(globs.__file__).read_bytes(),
        **(extra or {}),
    }
    patches = []
    for i, p in enumerate(request.patches):
        name = f"patches/{i:02d}-{p.name}.diff"
        files[name] = p.diff.encode("utf-8", errors="surrogateescape")
        patches.append({"name": p.name, "file": name, "untrusted": p.untrusted})
    job = {
        "repo_dir": "/work/repo",
        "workdir": workdir,
        "patches": patches,
        "test_patterns": list(request.source.test_file_patterns + request.source.test_infra_patterns),
        "prestart": prestart,
        "test": test,
    }
    files["job.json"] = json.dumps(job, indent=2).encode()
    return files


def _runner_result(result: RunResult, out: Path, runner_exit: int | None) -> dict | None:
    """Common part of reading /pbench/out/result.json; None when the run did not reach its tests."""
    res_path = out / "result.json"
    if not res_path.exists():
        result.status = RunStatus.INFRA_ERROR
        result.error = f"the runner wrote no result.json (runner exit {runner_exit}); see container.log"
        return None
    res = json.loads(res_path.read_text())
    result.patch_methods = {p["name"]: p["method"] for p in res.get("patches", [])}
    result.restored = res.get("restored", [])
    result.timings.update({k: float(v) for k, v in res.get("timings", {}).items() if k.endswith("_s")})
    result.status = RunStatus(res["status"])
    if result.status != RunStatus.COMPLETED:
        return None
    result.exit_code = res["test"]["exit_code"]
    return res


def _set_report(result: RunResult, report) -> None:
    result.tests = dict(report.tests)
    result.collection_errors = list(report.collection_errors)
    result.messages = dict(report.messages)
    # Evidence the suite ran: a report with tests in it, and the runner's own "tests ran" exit codes.
    result.suite_ran = bool(result.tests) and result.exit_code in (0, 1)
    bad = any(o in (Outcome.FAILED, Outcome.ERROR) for o in result.tests.values()) or result.collection_errors
    result.exit_code_mismatch = (result.exit_code == 0 and bool(bad)) or (result.exit_code == 1 and not bad)


def _read_pytest(result: RunResult, out: Path, runner_exit: int | None) -> None:
    if _runner_result(result, out, runner_exit) is None:
        return
    junit_path = out / "junit.xml"
    if not junit_path.exists():
        result.error = f"no JUnit XML written (test exit {result.exit_code})"
        return
    try:
        report = junit.parse_junit_file(junit_path)
    except ValueError as exc:
        result.error = f"unreadable JUnit XML: {exc}"
        return
    log_text = (out / "test.log").read_text(errors="replace") if (out / "test.log").exists() else ""
    summary = junit.summary_outcomes(log_text, known_ids=report.tests)
    _set_report(result, junit.merge_outcomes(report, summary))
    result.report_disagreements = junit.cross_check(report.tests, summary, report.collection_errors)[:50]


def _read_playwright(result: RunResult, out: Path, runner_exit: int | None, frontend_dir: str) -> None:
    from tasks_lib import playwright_report

    if _runner_result(result, out, runner_exit) is None:
        return
    if result.exit_code == 3:  # pbench-playwright.sh: the frontend server never answered
        result.status = RunStatus.PRESTART_FAILED
        result.error = "the frontend server did not answer (see serve.log)"
        return
    try:
        report = playwright_report.parse_playwright_out(out, frontend_dir=f"/work/repo/{frontend_dir}")
    except (OSError, ValueError) as exc:
        result.error = f"no readable Playwright report (test exit {result.exit_code}): {exc}"
        return
    _set_report(result, report)
    json_path = out / "playwright.json"
    if json_path.exists() and not (out / "playwright-load-errors.json").exists():
        log_text = (out / "test.log").read_text(errors="replace") if (out / "test.log").exists() else ""
        try:
            stats = json.loads(json_path.read_text()).get("stats", {})
        except (ValueError, AttributeError):
            stats = {}
        result.report_disagreements = playwright_report.cross_check_stats(
            stats, playwright_report.list_summary_counts(log_text)
        )
    if report.timed_out:
        result.status = RunStatus.TIMEOUT
        result.error = "Playwright's global timeout (the run's wall clock) stopped the suite"


def run_tests(request: RunRequest, settings: Settings | None = None) -> RunResult:
    """Run one side's tests for one task. Never raises for a task-level problem: the status says it.

    Holds one Docker slot of this host (a Prefect global concurrency limit, when configured) throughout.
    """
    with limits.docker_slot():
        return _run_tests(request, settings)


def _sandbox(
    stack: _Stack,
    image: str,
    role: str,
    env: dict[str, str],
    settings: Settings,
    aliases: list[str] | None = None,
):
    """A container for untrusted code: the task's private network only, limits, no capabilities for the
    code of the repository (the runner drops to an unprivileged user before running any of it)."""
    container = stack.client.containers.create(
        image,
        command=["/usr/bin/python3", "/pbench/in/pbench_runner.py"],
        name=f"pbench-{stack.run_id}-{role}",
        environment=env,
        labels=stack.labels,
        network=stack.network.name,
        working_dir="/work/repo",
        mem_limit=settings.mem_limit,
        memswap_limit=settings.mem_limit,
        pids_limit=settings.pids_limit,
        nano_cpus=int(settings.cpus * 1e9),
        cap_drop=["ALL"],
        # Only what the runner needs to hand the repository's code to an unprivileged user (uid 65534) and
        # to kill everything that code leaves; that user has no capabilities at all (no-new-privileges).
        cap_add=["SETUID", "SETGID", "KILL"],
        security_opt=["no-new-privileges"],
        init=True,
    )
    stack.containers.append(container)
    if aliases:
        stack.network.disconnect(container)
        stack.network.connect(container, aliases=aliases)
    return container


def _wait_for_http(container, port: int, deadline: float) -> None:
    """Poll a server from inside its own container until it answers (any status below 500)."""
    probe = (
        "import sys, urllib.request, urllib.error\n"
        "try:\n"
        f"    urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)\n"
        "except urllib.error.HTTPError as e:\n"
        "    sys.exit(0 if e.code < 500 else 1)\n"
        "except Exception:\n"
        "    sys.exit(1)\n"
    )
    while time.monotonic() < deadline:
        container.reload()
        if container.status not in ("created", "running"):
            raise _ServeFailed(container.logs(tail=30).decode(errors="replace"))
        code, _ = container.exec_run(["/usr/bin/python3", "-c", probe])
        if code == 0:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the backend did not answer on port {port}")


class _ServeFailed(Exception):
    """The backend-serve container exited before serving (patch, prestart or server failure)."""


def _run_tests(request: RunRequest, settings: Settings | None = None) -> RunResult:
    settings = settings or Settings.from_env()
    frontend = request.side == Side.FRONTEND
    start = time.monotonic()
    spec_timeout = request.source.frontend.timeout_s if frontend else request.source.backend.timeout_s
    timeout = request.timeout_s or spec_timeout
    deadline = start + timeout
    log_dir = Path(request.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    # Results are read from this folder after the container's outputs are copied in: an earlier run's must
    # never stand in for a container that died before writing its own.
    for stale in ("result.json", "junit.xml", "playwright.json", "playwright-load-errors.json", "run.json"):
        (log_dir / stale).unlink(missing_ok=True)
    result = RunResult(status=RunStatus.INFRA_ERROR, log_dir=str(log_dir))
    patch_texts = [p.diff for p in request.patches]

    try:
        backend_spec = images.backend_env_spec(
            request.source,
            images.dependency_contents(request.source, request.repo, request.commit, patch_texts),
        )
        backend_image = images.ensure_env_image(backend_spec, settings)
        image, spec = backend_image, backend_spec
        if frontend:
            spec = images.frontend_env_spec(
                request.source,
                images.dependency_contents(
                    request.source, request.repo, request.commit, patch_texts, "frontend"
                ),
                settings,
            )
            image = images.ensure_env_image(spec, settings)
    except ImageBuildError as exc:
        result.status = RunStatus.IMAGE_BUILD_FAILED
        result.error = str(exc)
        return _finish(result, log_dir, start)
    result.image, result.image_id, result.image_built = image.tag, image.id, image.built
    result.lock_sha = spec.lock_sha
    result.timings["image_s"] = round(time.monotonic() - start, 3)

    client = docker_client.get()
    stack = _Stack(client, uuid.uuid4().hex[:12])
    try:
        stack.network = client.networks.create(
            f"pbench-{stack.run_id}", driver="bridge", internal=True, labels=stack.labels
        )
        t0 = time.monotonic()
        service_env = _start_services(stack, request.source, settings, deadline)
        result.timings["services_s"] = round(time.monotonic() - t0, 3)
        snapshot = gitops.archive(request.repo, request.commit)
        backend = request.source.backend
        backend_env = {**backend.env, **service_env, **PINNED_ENV}

        if not frontend:
            files = _job(
                request,
                backend.dir,
                list(backend.prestart),
                {
                    "runner": backend.runner,
                    "command": backend.test_command,
                    "selection": list(request.selection),
                    "continue_on_collection_errors": request.continue_on_collection_errors,
                },
            )
            container = _sandbox(stack, image.tag, "tests", backend_env, settings)
        else:
            # Backend-serve: the same snapshot and patch chain, prestart steps, then the server (alias
            # "backend"); the frontend-tests container reaches it through a forward on localhost.
            t0 = time.monotonic()
            serve_files = _job(
                request,
                backend.dir,
                list(backend.prestart),
                {"runner": "serve", "command": backend.serve_command},
            )
            server = _sandbox(stack, backend_image.tag, "backend", backend_env, settings, aliases=["backend"])
            server.put_archive("/work/repo", snapshot)
            server.put_archive("/pbench/in", _tar(serve_files))
            server.start()
            try:
                _wait_for_http(server, backend.serve_port, deadline)
            except _ServeFailed as exc:
                serve_out = log_dir / "backend-serve"
                _extract_out(server, serve_out)
                (serve_out / "container.log").write_text(str(exc))
                res_path = serve_out / "result.json"
                res = json.loads(res_path.read_text()) if res_path.exists() else {}
                result.patch_methods = {p["name"]: p["method"] for p in res.get("patches", [])}
                # A patch that does not apply is the patch's; anything else stopped the server from serving.
                failed_apply = res.get("status") == RunStatus.PATCH_APPLY_FAILED
                result.status = RunStatus.PATCH_APPLY_FAILED if failed_apply else RunStatus.PRESTART_FAILED
                result.error = f"the backend-serve container exited before serving (see {serve_out})"
                return _finish(result, log_dir, start)
            result.timings["backend_serve_s"] = round(time.monotonic() - t0, 3)
            from tasks_lib import playwright_report

            selection = playwright_report.selection_args(request.selection) if request.selection else []
            files = _frontend_job(request, selection)
            left_ms = int(max(30.0, deadline - time.monotonic() - 60) * 1000)
            env = _frontend_env(request.source, left_ms)
            container = _sandbox(stack, image.tag, "tests", env, settings)

        t0 = time.monotonic()
        container.put_archive("/work/repo", snapshot)
        container.put_archive("/pbench/in", _tar(files))
        result.timings["copy_s"] = round(time.monotonic() - t0, 3)

        t0 = time.monotonic()
        container.start()
        remaining = max(1.0, deadline - time.monotonic())
        try:
            runner_exit = container.wait(timeout=remaining)["StatusCode"]
        except Exception as exc:  # requests' ReadTimeout / ConnectionError: the wall clock ran out
            if time.monotonic() < deadline - 1:
                raise
            log.info("run %s timed out after %ss (%s)", request.label, timeout, type(exc).__name__)
            container.kill()
            result.status = RunStatus.TIMEOUT
            result.error = f"wall-clock timeout of {timeout}s"
            runner_exit = None
        result.timings["container_s"] = round(time.monotonic() - t0, 3)
        (log_dir / "container.log").write_bytes(container.logs())
        for c in stack.containers[:-1]:
            (log_dir / f"{c.name.rsplit('-', 1)[-1]}.log").write_bytes(c.logs(tail=200))
        _extract_out(container, log_dir)
        if runner_exit is not None:
            if frontend:
                _read_playwright(result, log_dir, runner_exit, request.source.frontend.dir)
            else:
                _read_pytest(result, log_dir, runner_exit)
    except TimeoutError as exc:
        result.status = RunStatus.TIMEOUT
        result.error = str(exc)
    except Exception as exc:  # a Docker failure is infrastructure, never the patch's fault
        result.status = RunStatus.INFRA_ERROR
        result.error = f"{type(exc).__name__}: {exc}"
        log.warning("run %s: infrastructure error: %s", request.label, result.error)
    finally:
        stack.close()
    return _finish(result, log_dir, start)


def _finish(result: RunResult, log_dir: Path, start: float) -> RunResult:
    result.timings["total_s"] = round(time.monotonic() - start, 3)
    (log_dir / "run.json").write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    return result


def cleanup_leftovers(all_owners: bool = False) -> dict[str, int]:
    """Remove the containers, networks and volumes left by a crash: this owner's (PBENCH_OWNER, default
    "pbench"), or every owner's with `all_owners` (a test session or another user may be running now)."""
    client = docker_client.get()
    owner = os.environ.get("PBENCH_OWNER", "pbench")
    flt = {"label": LABEL} if all_owners else {"label": f"{LABEL_OWNER}={owner}"}
    counts = {"containers": 0, "networks": 0, "volumes": 0}
    for c in client.containers.list(all=True, filters=flt):
        c.remove(force=True, v=True)
        counts["containers"] += 1
    for n in client.networks.list(filters=flt):
        n.remove()
        counts["networks"] += 1
    for v in client.volumes.list(filters=flt):
        v.remove(force=True)
        counts["volumes"] += 1
    return counts
