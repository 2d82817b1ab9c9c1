"""What a test container is given: the job (root's only inside), the patches, and the harness's tools.

A job is everything a reader needs to re-run one engine run by hand: it is also written to the run's trace
folder (`job.json`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from tasks_lib import protocol
from tasks_lib.core import paths
from tasks_lib.engine import runners, witnesses
from tasks_lib.engine.records import DB_PORT, PINNED_ENV, RunRequest, service_aliases
from tasks_lib.engine.stack import tar_stream
from tasks_lib.sources import snapshots
from tasks_lib.sources.record import SourceRecord
from tasks_lib.sources.snapshots import Snapshot

RUNNER_FILES = (
    "pbench_runner.py",
    "pbench_proc.py",
    "pbench_rules.py",
    "pbench_protect.py",
    "pbench_pytest.py",
    "pbench_audit.py",
    "pbench_frontend.py",
    "pbench_await.py",
    "pbench_dns.py",
    "pbench_witness.py",
    "pbench_configs.py",
    "pbench_tsconfig.py",
    "pbench_refs.py",
    "pbench_warm.py",
)
FRONTEND_TOOL_FILES = ("playwright.pbench.config.mjs", "pbench-forward.mjs")
SERVE_TIMEOUT_S = 120


def tool_files(frontend: bool) -> dict[str, bytes]:
    """The harness's code for /pbench/tools (root's, read-only to everyone else)."""
    runner = paths.containers_dir() / "runner"
    files = {name: (runner / name).read_bytes() for name in RUNNER_FILES}
    shipped = Path(protocol.__file__).parent
    files |= {name: (shipped / module).read_bytes() for module, name in protocol.SHIPPED.items()}
    if frontend:
        files |= {n: (paths.containers_dir() / "frontend" / n).read_bytes() for n in FRONTEND_TOOL_FILES}
    return files


def job(
    request: RunRequest, workdir: str, prestart: list[str], test: dict, witness_spec=None, awaits=(), **extra
) -> dict:
    """`awaits`: what the runner waits for before any code of the repository runs (containers/runner/
    pbench_await.py)."""
    patches = [
        {"name": p.name, "file": f"patches/{i:02d}-{p.name}.diff", "untrusted": p.untrusted}
        for i, p in enumerate(request.patches)
    ]
    return {
        "repo_dir": "/work/repo",
        "workdir": workdir,
        "patches": patches,
        "test_patterns": list(request.source.test_file_patterns + request.source.test_infra_patterns),
        "prestart": prestart,
        "test": test,
        "witnesses": witness_spec,
        "output_cap": request.output_cap,
        "pytest_plugins": list(request.pytest_plugins) if request.pytest_plugins is not None else None,
        "await": list(awaits),
        # The base commit's tree and the seed of the runner's git, under /pbench/in (`archive`).
        "tree": snapshots.TREE,
        "git_seed": snapshots.SEED,
        **extra,
    }


def archive(request: RunRequest, job_: dict, frontend: bool, snapshot: Snapshot) -> Iterator[bytes]:
    """One tar for /pbench, streamed: in/ (the job, the patches, the tree and its git seed: `snapshot`'s
    files, which the runner unpacks into the work tree) and tools/ (the harness's code). One archive, a
    handful of files: what Docker unpacks into the container's own file system costs per file."""
    files: dict[str, bytes | Path] = {
        f"in/{p['file']}": d.diff.encode("utf-8", errors="surrogateescape")
        for p, d in zip(job_["patches"], request.patches, strict=True)
    }
    files["in/job.json"] = json.dumps(job_, indent=2).encode()
    files |= {f"in/{name}": path for name, path in snapshot.files().items()}
    files |= {f"tools/{name}": data for name, data in tool_files(frontend).items()}
    return tar_stream(files)


def service_probes(source: SourceRecord) -> list[dict]:
    """What a runner of the backend's tree waits for before any code of the repository runs (its gate,
    containers/runner/pbench_await.py): every service of the run answering on the private network."""
    return [
        {"kind": "postgres", "host": alias, "port": DB_PORT, "user": s.user, "db": s.db}
        for alias, s in zip(service_aliases(source), source.backend.services, strict=True)
    ]


def trace(job_: dict) -> str:
    """The job as the trace folder keeps it (the witnesses' names are drawn in the container)."""
    return json.dumps(job_, indent=2)


def _witness_spec(request: RunRequest, runner: str) -> dict | None:
    """Witnesses for a run with an untrusted patch, in the files of the graded tests (`witnesses.job_spec`)."""
    if not request.untrusted or not request.graded:
        return None
    spec = witnesses.job_spec(request.graded, runners.get(runner))
    return spec if spec["files"] else None


def backend_job(request: RunRequest) -> dict:
    backend = request.source.backend
    selection = list(request.selection)
    test = {
        "runner": backend.runner,
        "command": backend.test_command,
        "selection": selection,
        "continue_on_collection_errors": request.continue_on_collection_errors,
    }
    spec = _witness_spec(request, backend.runner)
    return job(request, backend.dir, list(backend.prestart), test, spec, service_probes(request.source))


def serve_job(request: RunRequest) -> dict:
    backend = request.source.backend
    test = {"runner": "serve", "command": backend.serve_command}
    return job(request, backend.dir, list(backend.prestart), test, awaits=service_probes(request.source))


def frontend_job(request: RunRequest, selection: list[str], global_timeout_ms: int) -> dict:
    """The frontend-tests container's job: the source's prestart, the dev server, Playwright from the image
    with the harness's config and reporters, on `selection` (Playwright arguments)."""
    source = request.source
    fe, backend = source.frontend, source.backend
    frontend = {
        "serve_command": fe.serve_command,
        "serve_url": f"http://localhost:{fe.serve_port}",
        "serve_timeout_s": SERVE_TIMEOUT_S,
        "warm_up_s": fe.warm_up_s,
        "forward": [f"{backend.serve_port}=backend:{backend.serve_port}"],
        "env": dict(fe.env),
        "playwright_env": {
            "PBENCH_BASE_URL": f"http://localhost:{fe.serve_port}",
            "PBENCH_BACKEND_URL": f"http://backend:{backend.serve_port}",
            "PBENCH_PW_GLOBAL_TIMEOUT_MS": str(global_timeout_ms),
        },
    }
    test = {"runner": fe.runner, "selection": selection}
    # Its gate opens once the backend-serve container answers: the container sets its tree up meanwhile.
    server = {"kind": "http", "url": f"http://backend:{backend.serve_port}/"}
    extra = {"frontend": frontend, "frontend_dir": fe.dir}
    return job(
        request, fe.dir, list(fe.prestart), test, _witness_spec(request, "playwright"), [server], **extra
    )


def frontend_env(source: SourceRecord) -> dict[str, str]:
    """The frontend-tests container's environment (the prestart steps and the dev server see it): the backend
    reached as "backend" on the private network, forwarded to localhost."""
    fe, backend = source.frontend, source.backend
    return {**fe.env, **PINNED_ENV, "PBENCH_BACKEND_URL": f"http://backend:{backend.serve_port}"}


def backend_env(source: SourceRecord, service_env: dict[str, str]) -> dict[str, str]:
    return {**source.backend.env, **service_env, **PINNED_ENV}
