"""What crosses the container wall, on both sides: the host writes the job (`/pbench/in/job.json`), the runner
writes how far it got (`/pbench/out/phase`, a line per phase) and what it found (`/pbench/out/result.json`).

Standard library only and importing nothing else of the project: shipped into every test container as
`pbench_protocol.py` (tasks_lib/protocol/__init__.py).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

JOB_FILE = "job.json"  # in /pbench/in
RESULT_FILE = "result.json"  # in /pbench/out
PHASE_FILE = "phase"  # in /pbench/out

# Everything the code under test prints, per run, all logs and reports together: past it the run is stopped
# (inside the container) and charged to the patch. The host never holds more than this of one run.
OUTPUT_CAP_BYTES = 64 * 2**20


# The test runners a source record may name (`runner` of a side): the host's registry
# (tasks_lib/engine/runners.py) and the container's dispatch table (pbench_runner.TEST_RUNNERS) hold one entry
# each. SERVE is the backend-serve container's job: the side's server, no tests.
TEST_RUNNERS = ("pytest", "playwright")
SERVE = "serve"


class Phase(StrEnum):
    """How far a run got, in order (the runner appends one line per phase it enters)."""

    PATCHES = "patches"
    SERVICES = "services"  # waiting at the gate for the run's services: no code of the repository yet
    SERVING = "serving"  # a dev server or the backend-serve container runs the repository's code
    PRESTART = "prestart"
    TESTS = "tests"


# From these on the patch's own code runs: a run stopped by the wall clock or the output cap is the patch's.
PATCH_PHASES = (Phase.PRESTART, Phase.SERVING, Phase.TESTS)


class RunnerStatus(StrEnum):
    """`result.json`'s status, as the runner writes it."""

    COMPLETED = "completed"  # the test command ran to its end (whatever its exit code)
    PATCH_APPLY_FAILED = "patch_apply_failed"
    PRESTART_FAILED = "prestart_failed"
    OUTPUT_LIMIT = "output_limit"
    SERVING = "serving"  # the backend-serve container: its server runs (written before it starts)
    SERVE_EXITED = "serve_exited"  # the backend-serve container: its server stopped


class PatchSpec(TypedDict):
    name: str
    file: str  # under /pbench/in
    untrusted: bool


# `job.json` (written by tasks_lib/engine/jobs.py, read by the runner); `await` is a keyword, hence this form.
Job = TypedDict(
    "Job",
    {
        "repo_dir": str,
        "workdir": str,
        "patches": list[PatchSpec],
        "test_patterns": list[str],
        "prestart": list[str],
        "test": dict[str, Any],  # the side's test command: `runner` (pytest, playwright), `command`, ...
        "witnesses": "dict[str, Any] | None",
        "output_cap": int,
        "pytest_plugins": "list[str] | None",
        "await": list[dict[str, Any]],  # what the runner waits for before any code of the repository runs
        "tree": str,  # under /pbench/in: the base commit's tree as a tar, unpacked into repo_dir
        "git_seed": str,  # under /pbench/in: an index and a pack of the base commit's files for the runner's git
        "go": bool,  # a run made ahead: the runner waits, its tree set up, for "go" on its standard input
    },
    total=False,
)


class Result(TypedDict, total=False):
    """`result.json` (written by the runner, read by tasks_lib/engine/results.py)."""

    status: str  # a RunnerStatus
    patches: list[dict[str, Any]]  # {name, method} per applied patch
    restored: list[str]
    restored_why: dict[str, str]
    prestart: list[dict[str, Any]]
    test: dict[str, Any] | None  # {command, exit_code, ...}
    tampering: list[str]
    timings: dict[str, float]
    output_limit: dict[str, int]  # {cap, by}


def read_result(out: Path) -> Result | None:
    """The runner's result in a run's output folder; None when it wrote none."""
    path = Path(out) / RESULT_FILE
    if not path.exists():
        return None
    return json.loads(path.read_text())


def write_result(out: Path, result: Result) -> None:
    (Path(out) / RESULT_FILE).write_text(json.dumps(result, indent=2))


def last_phase(out: Path) -> str | None:
    """The phase a run was in when it stopped (None: it wrote none)."""
    try:
        lines = (Path(out) / PHASE_FILE).read_text().split()
    except OSError:
        return None
    return lines[-2] if len(lines) >= 2 else None
