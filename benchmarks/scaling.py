"""Scaling on this machine: the demo evaluation (gold, every instance really run) with 1 and with 2 workers, and the
ratio of their wall times. Run:

    python benchmarks/scaling.py [--runs 5] [--runner threads|dask] [--json out.json]

`threads` (default) is what `pbench evaluate --max-workers N` uses (Prefect's thread pool); `dask` is a local Dask
cluster of N single-threaded worker processes (what `pbench evaluate --dask-workers N` starts). The flow runs in
this process; Prefect's ephemeral server is started before the first measurement (a no-op flow), so that no
configuration pays for it. Each measurement starts with an empty verdict cache; the two configurations alternate
(1-2, 2-1, 1-2, ...) so that a drift in the machine's load weighs on both. Images are warm (content-keyed, shared).

Each measurement also records the machine's busy CPU time over its window (/proc/stat: every process, containers
and dockerd included) as mean busy cores. A run of 1 worker that keeps c cores busy does c x T1 core-seconds of
work; 2 workers cannot do less work, and this machine has N cores, so their wall time is at least c x T1 / N and
the speed-up at most N / c (printed as the bound; work added by running side by side only lowers it).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import _bench


def busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is inside user time: not summed


def measure(workers: int, runner: str, tag: str) -> tuple[float, float]:
    """(wall seconds, mean busy cores of the machine over them)."""
    kwargs = {"dask_workers": workers} if runner == "dask" else {}
    busy = busy_seconds()
    start = time.monotonic()
    report = _bench.evaluate_demo_gold(workers, f"bench-scaling-{runner}-{workers}w-{tag}", **kwargs)
    elapsed = time.monotonic() - start
    cores = (busy_seconds() - busy) / elapsed
    if report["resolved"] != report["total"]:
        raise SystemExit(f"not every instance resolved with {workers} worker(s): {report['instances']}")
    return elapsed, cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runner", choices=("threads", "dask"), default="threads")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    _bench.demo_evaluation_ready(args.scratch, "scaling")

    times: dict[int, list[float]] = {1: [], 2: []}
    cores: dict[int, list[float]] = {1: [], 2: []}
    loads: list[float] = []
    stamp = time.strftime("%H%M%S")
    for i in range(args.runs):
        for workers in (1, 2) if i % 2 == 0 else (2, 1):
            secs, busy = measure(workers, args.runner, f"{stamp}-{i}")
            times[workers].append(secs)
            cores[workers].append(busy)
            loads.append(_bench.load())
            print(
                f"run {i + 1}, {workers} worker(s): {secs:.1f}s, {busy:.2f} cores busy, load {loads[-1]:.1f}",
                flush=True,
            )
    report(times, cores, loads, args.runner)
    _bench.save_json(
        args.json,
        {
            "runs": args.runs,
            "runner": args.runner,
            "times": times,
            "busy_cores": cores,
            "cpus": os.cpu_count() or 1,
            "loads": loads,
        },
    )


def report(
    times: dict[int, list[float]], cores: dict[int, list[float]], loads: list[float], runner: str
) -> None:
    """The table, the speed-up and the bound the 1-worker runs' CPU puts on it."""
    ratios = [a / b for a, b in zip(times[1], times[2], strict=True)]
    print()
    print(
        _bench.table(
            ["configuration", "median s", "runs", "busy cores (median)"],
            [
                [
                    f"{w} worker(s), {runner}",
                    _bench.median(t),
                    _bench.runs_text(t, "{:.1f}"),
                    _bench.median(cores[w]),
                ]
                for w, t in times.items()
            ],
        )
    )
    print(
        f"\nspeed-up 2 vs 1 workers: {_bench.median(times[1]) / _bench.median(times[2]):.2f}x (ratio of medians); "
        f"per-round ratios {_bench.runs_text(ratios)}; load {min(loads):.1f}-{max(loads):.1f}"
    )
    ncpu = os.cpu_count() or 1
    bound = ncpu / _bench.median(cores[1])
    print(
        f"bound from the 1-worker runs' CPU: at most {bound:.2f}x on {ncpu} cores ({ncpu} / {_bench.median(cores[1]):.2f})"
    )


if __name__ == "__main__":
    main()
