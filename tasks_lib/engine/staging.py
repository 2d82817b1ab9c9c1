"""Runs made ahead: an evaluation scores one instance while the next one's run is made beside it.

`stage(request)` makes, in the background, everything of a run up to its tests: the images looked up, the
network, the services launched, the snapshot, the tests container created, filled and started, its runner
setting the tree up (unpacked, committed, patched, protected) and then waiting, before its gate and before any
code of the repository runs, for the host's go on its standard input. `run_tests` of an equal request takes the
run over (`take`): its clock starts then, its runner is told to go, and the rest is the run as usual. With one
worker on two cores, the making (~1.5 s of Docker and git per mcp-context-forge instance) happens while the
previous instance's tests run, off the evaluation's critical path (docs/performance.md section 18), and
yields the CPU to them: the making thread runs niced, the container with the least CPU weight until its go.

What is made ahead is what the run itself would make: the request is matched by everything that decides the
run (`key`), never by instance id alone; a run that failed to be made, or that nobody takes, is removed
(`discard`) and the real run makes its own. Only backend sides are made ahead: a frontend run's Playwright
budget is set from the run's clock when its job is made. A staged run holds a Docker slot of its own, taken
only when one is free: it never delays a run that needs one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

from tasks_lib.core import docker_client, limits
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import RunStatus, Side
from tasks_lib.engine.records import RunRequest, RunResult
from tasks_lib.engine.stack import Stack

log = logging.getLogger(__name__)

# The nice value of the thread that makes a run ahead (its container's CPU weight: `stack.STAGED_CPU_SHARES`).
STAGING_NICE = 10
_lock = threading.Lock()
_staged: dict[str, Staged] = {}


def key(request: RunRequest) -> str:
    """Everything that decides a run's containers and job (not its label, not the caller's spec book)."""
    fields = {
        "source": request.source.name,
        "repo": str(request.repo),
        "commit": request.commit,
        "log_dir": str(request.log_dir),
        "patches": [
            [p.name, p.untrusted, hashlib.sha256(p.diff.encode("utf-8", "surrogateescape")).hexdigest()]
            for p in request.patches
        ],
        "selection": list(request.selection),
        "side": str(request.side),
        "timeout_s": request.timeout_s,
        "continue_on_collection_errors": request.continue_on_collection_errors,
        "pytest_plugins": None if request.pytest_plugins is None else list(request.pytest_plugins),
        "output_cap": request.output_cap,
        "graded": list(request.graded),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class Staged:
    """One run being made ahead: its Docker slot, and the future of its side (`run._Side`)."""

    def __init__(self, request: RunRequest, slot: int | None):
        self.request, self.slot = request, slot
        self.future: Future | None = None
        self.made_at = time.monotonic()

    def side(self):
        """The run's side once made; None when making it failed (its objects removed: the caller runs it
        afresh)."""
        try:
            return self.future.result()
        except Exception as exc:
            log.info("run %s made ahead failed (%s): it is made again", self.request.label, exc)
            return None

    @contextlib.contextmanager
    def holding(self):
        """The staged run's Docker slot, held until the run is over, then released."""
        try:
            yield
        finally:
            limits.release_docker_slot(self.slot)

    def discard(self) -> None:
        side = self.side()
        if side is not None:
            side.stack.close()
        limits.release_docker_slot(self.slot)


def stage(request: RunRequest, settings: Settings | None = None) -> bool:
    """Start making `request`'s run in the background; False (nothing started) for a frontend side, a request
    already staged, or when no Docker slot is free now."""
    if request.side != Side.BACKEND:
        return False
    k = key(request)
    with _lock:
        if k in _staged:
            return False
    free, slot = limits.free_docker_slot(f"{request.label or 'run'} (made ahead)")
    if not free:
        return False
    staged = Staged(request, slot)
    pool = ThreadPoolExecutor(1, thread_name_prefix="pbench-stage")
    staged.future = pool.submit(_make, request, settings or Settings.from_env())
    pool.shutdown(wait=False)
    with _lock:
        _staged[k] = staged
    return True


def _make(request: RunRequest, settings: Settings):
    from tasks_lib.engine import run

    # This thread's share of the host's CPU (the archive streamed, the Docker calls) yields to the process's
    # other threads and to the tests being run: Linux gives each thread its own nice value.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), STAGING_NICE)
    stack = Stack(docker_client.get(), uuid.uuid4().hex[:12])
    stack.create_network(background=True)
    result = RunResult(status=RunStatus.INFRA_ERROR, log_dir=str(request.log_dir))
    try:
        return run.prepare(
            request, settings, stack, result, time.monotonic() + run._timeout(request), go=True
        )
    except BaseException:
        stack.close()
        raise


def take(request: RunRequest) -> Staged | None:
    """The run made ahead for an equal request, now the caller's (or None)."""
    with _lock:
        return _staged.pop(key(request), None)


def discard() -> int:
    """Remove every run made ahead that nobody took (the end of an evaluation, a stop); returns how many."""
    with _lock:
        left = list(_staged.values())
        _staged.clear()
    for staged in left:
        staged.discard()
    return len(left)
