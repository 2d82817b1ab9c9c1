"""Services the harness starts for a run (Postgres), and waiting for servers to answer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tasks_lib.core.config import Settings
from tasks_lib.core.errors import InfraError
from tasks_lib.engine.records import DB_PORT, service_aliases
from tasks_lib.engine.stack import LOG_CONFIG, Stack
from tasks_lib.images import build as images
from tasks_lib.sources.record import SourceRecord


class ServiceTimeout(TimeoutError):
    """A service the harness owns did not become ready: infrastructure, never the patch's failure."""


class ServeFailed(Exception):
    """The backend-serve container exited before serving (patch, prestart or server failure)."""


def wait_for_postgres(container, service, deadline: float) -> None:
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
    raise ServiceTimeout("postgres did not become ready")


def start_services(
    stack: Stack, source: SourceRecord, settings: Settings, deadline: float, **options
) -> dict[str, str]:
    """`launch_services`, then wait until every service answers: the environment that tells the tests where
    they are. `options` (`wait`, `pg_image`) are for benchmarks comparing variants."""
    launched = launch_services(stack, source, settings, deadline, **options)
    launched.ready()
    return launched.env


@dataclass(frozen=True)
class Launched:
    """The services of a run being started in the background.

    `env`: where the tests find them. `ready()`: returns once every service answers (ServiceTimeout at the
    deadline; a Docker failure of their making is raised there)."""

    env: dict[str, str]
    ready: Callable[[], None]


def launch_services(
    stack: Stack,
    source: SourceRecord,
    settings: Settings,
    deadline: float,
    *,
    wait=wait_for_postgres,
    pg_image: str | None = None,
) -> Launched:
    """The source's services on the run's private network (the first one aliased "db"), created and started
    in the background, not awaited. The engine takes the snapshot and creates, fills and starts the side's
    containers meanwhile; their runners pass their gate only once the services answer them
    (containers/runner/pbench_await.py): `ready()` is the host's own watch of the same services, which ends the
    run when one fails or never answers."""
    from concurrent.futures import ThreadPoolExecutor

    services = source.backend.services
    aliases = service_aliases(source)
    env: dict[str, str] = {}
    for alias, service in zip(aliases, services, strict=True):
        env.update(service.render_env(alias, DB_PORT))
    if not services:
        return Launched(env, lambda: None)

    def launch() -> list:
        image = pg_image or images.bootstrap(settings)["postgres"].tag
        return [
            _start_postgres(stack, image, i, s, a)
            for i, (s, a) in enumerate(zip(services, aliases, strict=True))
        ]

    pool = ThreadPoolExecutor(1, thread_name_prefix="pbench-services")
    launching = pool.submit(launch)
    pool.shutdown(wait=False)
    stack.pending.append(launching)
    awaited = []

    def ready() -> None:
        if awaited:
            return  # a second call has nothing left to wait for
        for container, service in launching.result():
            wait(container, service, deadline)
        awaited.append(True)

    return Launched(env, ready)


# The cluster lives in memory: it dies with the run anyway (durability is off), and a volume cost a create and a
# remove (~0.15 s) and a copy of the 40-MB template cluster to disk, 0.4-1.1 s to ready against 0.26-0.29 s on
# a tmpfs (docs/performance.md section 12). Its pages count against the container's memory, hence the limit
# above the tmpfs's size.
PG_TMPFS = {"/var/lib/pbench-pg": "size=1g,mode=0755"}
PG_MEM_LIMIT = "2g"


def _start_postgres(stack: Stack, image: str, i: int, service, alias: str):
    container = stack.client.containers.create(
        image,
        name=f"pbench-{stack.run_id}-db{i}",
        environment={"PG_USER": service.user, "PG_PASSWORD": service.password, "PG_DB": service.db},
        tmpfs=PG_TMPFS,
        labels=stack.labels,
        network=stack.net().name,
        networking_config=stack.endpoint([alias]),
        mem_limit=PG_MEM_LIMIT,
        pids_limit=512,
        log_config=LOG_CONFIG,
    )
    stack.containers.append(container)
    container.start()
    return container, service


def wait_for_http(container, port: int, deadline: float) -> None:
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
            raise ServeFailed(container.logs(tail=30).decode(errors="replace"))
        # Isolated (-I) and from "/", as the tool user: nothing of the work tree is importable by the probe.
        code, _ = container.exec_run(["/usr/bin/python3", "-I", "-c", probe], workdir="/", user="65533:65533")
        if code == 0:
            return
        time.sleep(0.5)
    raise TimeoutError(f"the backend did not answer on port {port}")
