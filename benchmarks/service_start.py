"""Start-up of a run's services (Postgres), the largest fixed cost of a backend run, and its teardown: what
`engine.services.start_services` does (volume, container on the run's private network, start, wait until
Postgres accepts connections) and `engine.Stack.close()`. Run:

    python benchmarks/service_start.py [--runs 10] [--compare-image pbench/postgres:<tag>] [--old-wait]
                                       [--json out.json]

Without options it times the current Postgres image (`pbench images bootstrap`'s) and the current engine code.
--compare-image adds another image (e.g. the one before a change of containers/postgres/); --old-wait adds, for
each image, the readiness loop the engine had before docs/performance.md's change (one `pg_isready` exec from
the host every 0.5 s), kept here for the comparison. Every variant is timed in turn in each round (the order
reversed every other round), so that the machine's load weighs on all alike. Uses the demo source's service.
"""

from __future__ import annotations

import argparse
import time
import uuid
from pathlib import Path

import _bench


def old_wait_for_postgres(container, service, deadline: float) -> None:
    """engine.services.wait_for_postgres before the change: one exec from the host per try, every 0.5 s."""
    from tasks_lib.core.errors import InfraError

    while time.monotonic() < deadline:
        container.reload()
        if container.status not in ("created", "running"):
            raise InfraError(
                f"postgres exited during start-up: {container.logs(tail=20).decode(errors='replace')}"
            )
        code, _ = container.exec_run(
            ["sh", "-c", f"pg_isready -q -h 127.0.0.1 -U {service.user} -d {service.db}"]
        )
        if code == 0:
            return
        time.sleep(0.5)
    raise TimeoutError("postgres did not become ready")


def start_once(source, settings, pg_tag: str | None, old_wait: bool = False) -> tuple[float, float]:
    """(seconds until Postgres is ready, seconds to remove everything) for one private network + services."""
    from tasks_lib import engine
    from tasks_lib.core import docker_client

    wait = old_wait_for_postgres if old_wait else engine.services.wait_for_postgres
    client = docker_client.get()
    stack = engine.Stack(client, "bench" + uuid.uuid4().hex[:8])
    try:
        start = time.monotonic()
        stack.create_network()
        engine.services.start_services(
            stack, source, settings, time.monotonic() + 300, wait=wait, pg_image=pg_tag
        )
        ready = time.monotonic() - start
    finally:
        t0 = time.monotonic()
        stack.close()
        teardown = time.monotonic() - t0
    return ready, teardown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--compare-image", default=None, help="another Postgres image to time in alternation")
    parser.add_argument(
        "--old-wait", action="store_true", help="also time the engine's former readiness loop"
    )
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    _bench.use_scratch(args.scratch, "services")
    from tasks_lib.core.config import Settings
    from tasks_lib.images import build as images
    from tasks_lib.sources.record import load_source

    settings = Settings.from_env()
    source = load_source("demo")
    current = images.bootstrap(settings)["postgres"].tag
    # label -> (image to use instead of the current one, former readiness loop)
    images_ = ([(args.compare_image, args.compare_image)] if args.compare_image else []) + [(current, None)]
    variants = {}
    for name, tag in images_:
        if args.old_wait:
            variants[f"{name}, former wait"] = (tag, True)
        variants[f"{name}, current wait"] = (tag, False)
    for tag, _ in images_:
        start_once(source, settings, tag)  # warm-up: page cache, image layers
    ready: dict[str, list[float]] = {v: [] for v in variants}
    teardown: dict[str, list[float]] = {v: [] for v in variants}
    loads = []
    for i in range(args.runs):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))
        for name in order:
            r, t = start_once(source, settings, *variants[name])
            ready[name].append(r)
            teardown[name].append(t)
            loads.append(_bench.load())
            print(f"run {i + 1} {name}: ready {r:.2f}s, teardown {t:.2f}s, load {loads[-1]:.1f}", flush=True)
    rows = [
        [
            name,
            _bench.median(ready[name]),
            _bench.median(teardown[name]),
            _bench.runs_text(ready[name]),
        ]
        for name in variants
    ]
    print()
    print(_bench.table(["Postgres image, readiness loop", "ready s", "teardown s", "ready, every run"], rows))
    print(f"current image: {current}")
    print(f"load {min(loads):.1f}-{max(loads):.1f}")
    _bench.save_json(args.json, {"runs": args.runs, "ready": ready, "teardown": teardown, "loads": loads})


if __name__ == "__main__":
    main()
