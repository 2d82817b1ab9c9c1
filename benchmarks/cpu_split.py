"""Where the CPU of a demo evaluation goes: the demo (gold, every instance really run) evaluated with 1 and with 2
workers while a sampler reads, every 0.2 s, the CPU time of every container of the run (its cgroup, so the
short-lived processes inside count too), of the Docker daemon's processes and of this process (the flow). Run:

    python benchmarks/cpu_split.py [--runs 3] [--json out.json]

Containers are grouped by role (`pbench-<run>-<role>`: db0 = Postgres, tests, backend = backend-serve) and, for
the tests container, by side (the image's name says backend or frontend). Each sample keeps the highest value
seen per container and per process, so what a container used after the last sample before its removal (at
most 0.2 s of it) is missed. cgroup v1 layout (`/sys/fs/cgroup/cpuacct/docker/<id>`), as on this machine.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import _bench
from scaling import busy_seconds

CGROUP = Path("/sys/fs/cgroup/cpuacct/docker")
HOST_PROCESSES = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "docker-init")
TICK = os.sysconf("SC_CLK_TCK")


def container_cpu() -> dict[str, float]:
    """CPU seconds of every running container, by id (its cgroup: everything that ran inside it)."""
    found = {}
    for usage in CGROUP.glob("*/cpuacct.usage") if CGROUP.exists() else []:
        try:
            found[usage.parent.name] = int(usage.read_text()) / 1e9
        except (OSError, ValueError):
            continue  # removed meanwhile
    return found


def host_cpu() -> dict[tuple[int, str], float]:
    """CPU seconds of the Docker daemon's processes and of this one, by (pid, name)."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        pid = int(stat.parent.name)
        if comm in HOST_PROCESSES or pid == os.getpid():
            fields = text[text.rindex(")") + 2 :].split()
            name = "flow (this process)" if pid == os.getpid() else comm.removesuffix("-runc-v2")
            found[(pid, name)] = (int(fields[11]) + int(fields[12])) / TICK
    return found


class Sampler:
    """The highest CPU seconds seen per container and per host process, sampled every 0.2 s until `stop()`."""

    def __init__(self, client):
        self.client, self.containers, self.roles, self.host = client, {}, {}, {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.done.wait(0.2):
            self.sample()

    def sample(self) -> None:
        for cid, secs in container_cpu().items():
            self.containers[cid] = max(secs, self.containers.get(cid, 0.0))
            if cid not in self.roles:
                self.roles[cid] = self._role(cid)
        for key, secs in host_cpu().items():
            self.host[key] = max(secs, self.host.get(key, 0.0))

    def _role(self, cid: str) -> str:
        try:
            c = self.client.containers.get(cid)
        except Exception:
            return "unknown"
        from tasks_lib.core.constants import LABEL_OWNER

        if c.labels.get(LABEL_OWNER) != os.environ.get("PBENCH_OWNER"):
            return "other containers (not this benchmark's)"
        role = c.name.rsplit("-", 1)[-1]
        if role == "tests":
            side = "frontend" if "frontend" in c.attrs["Config"]["Image"] else "backend"
            return f"tests ({side} side)"
        return {"db0": "postgres", "backend": "backend-serve"}.get(role, role)

    def stop(self, before: dict[tuple[int, str], float]) -> dict[str, float]:
        """CPU seconds by role and host process name; `before`: the host processes' CPU at the start."""
        self.done.set()
        self.thread.join()
        self.sample()
        split: dict[str, float] = {}
        for cid, secs in self.containers.items():
            split[self.roles[cid]] = split.get(self.roles[cid], 0.0) + secs
        for key, secs in self.host.items():
            split[key[1]] = split.get(key[1], 0.0) + secs - before.get(key, 0.0)
        return split


def measure(workers: int, tag: str) -> tuple[float, float, dict[str, float]]:
    from tasks_lib.core import docker_client

    before = host_cpu()
    busy, start = busy_seconds(), time.monotonic()
    sampler = Sampler(docker_client.get())
    _bench.evaluate_demo_gold(workers, f"bench-cpu-split-{workers}w-{tag}")
    split = sampler.stop(before)
    elapsed = time.monotonic() - start
    return elapsed, busy_seconds() - busy, split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    _bench.demo_evaluation_ready(args.scratch, "cpu-split")

    runs: dict[int, list[dict]] = {1: [], 2: []}
    stamp = time.strftime("%H%M%S")
    for i in range(args.runs):
        for workers in (1, 2) if i % 2 == 0 else (2, 1):
            secs, busy, split = measure(workers, f"{stamp}-{i}")
            runs[workers].append({"wall_s": secs, "busy_s": busy, "split_s": split, "load": _bench.load()})
            print(f"run {i + 1}, {workers} worker(s): {secs:.1f}s wall, {busy:.1f} busy core-s", flush=True)
    names = sorted({k for rs in runs.values() for r in rs for k in r["split_s"]})
    rows = [
        [name, *(_bench.median([r["split_s"].get(name, 0.0) for r in runs[w]]) for w in (1, 2))]
        for name in names
    ]
    rows.sort(key=lambda row: -row[1])
    rows.append(
        [
            "accounted / machine busy",
            *(
                f"{_bench.median([sum(r['split_s'].values()) for r in runs[w]]):.1f} / "
                f"{_bench.median([r['busy_s'] for r in runs[w]]):.1f}"
                for w in (1, 2)
            ),
        ]
    )
    print()
    print(_bench.table(["CPU seconds (median)", "1 worker", "2 workers"], rows))
    _bench.save_json(args.json, {"runs": runs})


if __name__ == "__main__":
    main()
