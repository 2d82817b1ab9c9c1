"""Concurrency limits: Docker slots per host (file locks) and the GitHub API budget (a Prefect rate limit).

A Docker slot is a property of the machine: `docker_slot()` takes one of `docker_slots()` lock files under
`slots_dir()` with `flock`, so the kernel releases it the moment its holder dies however it dies. (A Prefect
global concurrency limit used for this leaked: a run killed while it held a slot left the slot taken in the
API's database — its lease lived in the memory of an ephemeral server that died with it — and every later run
of the host had one stack fewer; measured on this machine after an interrupted season: 1 of 2 slots left.)
Processes share slots when they share the slots folder (the cache folder by default, which a work-pool
container mounts with the output folder).

The GitHub crawl takes a rate-limit slot per pull request it fetches; a rate limit decays, so it cannot leak. It
is taken non-strictly: where `ensure_limits()` never created it (a bare ephemeral server) it is a no-op.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import sys
import time
from pathlib import Path

from tasks_lib.core import paths, stopping

GITHUB_LIMIT = "pbench-github-api"
DEFAULT_DOCKER_SLOTS = 2
_POLL_S = 0.5

log = logging.getLogger(__name__)


def docker_limit_name(host: str | None = None) -> str:
    host = host or os.environ.get("PBENCH_DOCKER_HOST_NAME") or socket.gethostname()
    return "pbench-docker-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in host)


def slots_dir(host: str | None = None) -> Path:
    base = os.environ.get("PBENCH_SLOTS_DIR")
    return (Path(base) if base else paths.cache_dir() / "docker-slots") / docker_limit_name(host)


def docker_slots(host: str | None = None) -> int:
    """The test stacks this host may run at once (`pbench limits --docker-slots`, default 2)."""
    try:
        return max(1, int((slots_dir(host) / "limit").read_text().strip()))
    except (OSError, ValueError):
        return DEFAULT_DOCKER_SLOTS


def set_docker_slots(n: int, host: str | None = None) -> None:
    if n < 1:
        raise ValueError(f"docker slots: {n} (must be at least 1)")
    folder = slots_dir(host)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".limit.{os.getpid()}"
    tmp.write_text(f"{n}\n")
    tmp.replace(folder / "limit")


def slots_in_use(host: str | None = None) -> int:
    """Slots held right now by any process (each probed with a non-blocking lock)."""
    used = 0
    for i in range(docker_slots(host)):
        fd = _try_lock(slots_dir(host) / f"slot-{i}")
        if fd is None:
            used += 1
        else:
            _release(fd)
    return used


def _in_prefect_run() -> bool:
    # A flow or task of this process has Prefect imported. Without it (`pbench score`, `run-tests`), importing it
    # only to ask would cost ~2 s of every such command (docs/performance.md).
    if "prefect" not in sys.modules:
        return False
    try:
        from prefect.context import FlowRunContext, TaskRunContext

        return FlowRunContext.get() is not None or TaskRunContext.get() is not None
    except Exception:
        return False


def _try_lock(path: Path) -> int | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # flock, not lockf: flock locks belong to the open file, so two threads of one process exclude each
        # other; POSIX locks belong to the process and would let its threads share one slot.
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _release(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(label: str) -> int:
    folder, waited = slots_dir(), False
    while True:
        n = docker_slots()
        for i in range(n):
            fd = _try_lock(folder / f"slot-{i}")
            if fd is not None:
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} {label}\n".encode())
                return fd
        if not waited:
            log.info("%s: waiting for a Docker slot of %s (%d of %d in use)", label, folder.name, n, n)
            waited = True
        stopping.check()
        time.sleep(_POLL_S)


@contextlib.contextmanager
def docker_slot(label: str = "run"):
    """Hold one Docker slot of this host while a run's containers live (inside a flow or task run; outside
    one, e.g. `pbench run-tests` by hand, no slot is taken)."""
    if not _in_prefect_run():
        yield
        return
    fd = _acquire(label)
    try:
        yield
    finally:
        _release(fd)


def free_docker_slot(label: str = "run") -> tuple[bool, int | None]:
    """A Docker slot taken now if one is free, never waited for (a run made ahead: `engine.staging`): (True,
    its lock) when taken, (True, None) outside a flow or task run (none is needed), (False, None) when every
    slot is in use. Give it back with `release_docker_slot`."""
    if not _in_prefect_run():
        return True, None
    folder = slots_dir()
    for i in range(docker_slots()):
        fd = _try_lock(folder / f"slot-{i}")
        if fd is not None:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} {label}\n".encode())
            return True, fd
    return False, None


def release_docker_slot(fd: int | None) -> None:
    if fd is not None:
        _release(fd)


def github_call(requests: int = 1) -> None:
    """Wait for `requests` slots of the GitHub API budget (a rate limit: slots decay, they are not released)."""
    if not _in_prefect_run():
        return
    from prefect.concurrency.sync import rate_limit

    rate_limit(GITHUB_LIMIT, occupy=max(1, requests), strict=False)


def ensure_limits(docker_slots_: int = DEFAULT_DOCKER_SLOTS, github_per_hour: int = 4000) -> dict[str, dict]:
    """Set this host's Docker slots and create or update the GitHub rate limit on the current Prefect API;
    returns what is now configured. A Prefect limit named like the host's Docker slots (what earlier versions
    used, and what could leak) is removed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    set_docker_slots(docker_slots_)
    spec = {"limit": max(1, github_per_hour // 60), "slot_decay_per_second": github_per_hour / 3600}
    with get_client(sync_client=True) as client:
        with contextlib.suppress(ObjectNotFound):
            client.delete_global_concurrency_limit_by_name(docker_limit_name())
        try:
            client.read_global_concurrency_limit_by_name(GITHUB_LIMIT)
            client.update_global_concurrency_limit(
                GITHUB_LIMIT, GlobalConcurrencyLimitUpdate(active=True, **spec)
            )
        except ObjectNotFound:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=GITHUB_LIMIT, active=True, **spec)
            )
        github = client.read_global_concurrency_limit_by_name(GITHUB_LIMIT)
    return {
        docker_limit_name(): {
            "limit": docker_slots(),
            "in_use": slots_in_use(),
            "where": str(slots_dir()),
        },
        GITHUB_LIMIT: github.model_dump(include={"limit", "slot_decay_per_second", "active"}),
    }
