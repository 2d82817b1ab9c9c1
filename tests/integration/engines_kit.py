"""Two Docker engines as two hosts, one registry, one Dask cluster (issue 41): what test_registry_two_engines.py and
benchmarks/two_engines.py start and stop. The services themselves are `./dev registry` and `./dev engine`, the
set-up an operator runs (docs/operations.md, "Several machines").
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def dev(*args: str, env: Mapping[str, str] | None = None, timeout: float = 300) -> str:
    """`./dev ARGS`; the last line it printed (`PBENCH_REGISTRY=...`, `DOCKER_HOST=...`)."""
    proc = subprocess.run(
        [str(PROJECT / "dev"), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"./dev {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    return lines[-1].split("=", 1)[1] if lines and "=" in lines[-1] else ""


@contextlib.contextmanager
def registry(folder: Path, port: int) -> Iterator[str]:
    """A registry of images on 127.0.0.1:`port`, its storage under `folder`; yields PBENCH_REGISTRY."""
    env = {"PBENCH_REGISTRY_DIR": str(folder), "PBENCH_REGISTRY_PORT": str(port)}
    address = dev("registry", "start", env=env)
    try:
        yield address
    finally:
        dev("registry", "stop", env=env)


@contextlib.contextmanager
def engine(n: int, folder: Path, purge: bool = True) -> Iterator[str]:
    """Docker engine `n` beside the default one, its data root under `folder`; yields its DOCKER_HOST."""
    env = {"PBENCH_ENGINES_RUN": str(folder / "run"), "PBENCH_ENGINES_DIR": str(folder / "data")}
    host = dev("engine", "start", str(n), env=env)
    try:
        yield host
    finally:
        dev("engine", "stop", str(n), *(["--purge"] if purge else []), env=env)


def client_of(docker_host: str):
    import docker

    return docker.DockerClient(base_url=docker_host, timeout=300)


@contextlib.contextmanager
def dask_cluster(
    folder: Path, workers: Mapping[str, str], env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A Dask scheduler and one single-threaded worker per engine (name -> DOCKER_HOST, "" for the default
    engine), each worker a process of its own with that engine in its environment; yields the scheduler's
    address once every worker has joined."""
    from distributed import Client

    folder.mkdir(parents=True, exist_ok=True)
    scheduler_file = folder / "scheduler.json"
    scheduler_file.unlink(missing_ok=True)
    base = {**os.environ, **(env or {})}
    # One task per worker at a time: the scheduler's default (1.1 x threads) would let one worker take two.
    base["DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION"] = "1.0"
    procs = []
    logs = []

    def start(args: list[str], log: str, extra: Mapping[str, str]) -> None:
        fh = open(folder / log, "w")  # noqa: SIM115  (closed at the end)
        logs.append(fh)
        proc_env = {k: v for k, v in {**base, **extra}.items() if k != "DOCKER_HOST" or v}
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                env=proc_env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=PROJECT,
            )
        )

    try:
        start(
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            "scheduler.log",
            {},
        )
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        for name, docker_host in workers.items():
            start(
                [
                    "worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--name",
                    name,
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                ],
                f"worker-{name}.log",
                {"DOCKER_HOST": docker_host},
            )
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(len(workers), timeout=120)
            address = client.scheduler.address
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for fh in logs:
            fh.close()
