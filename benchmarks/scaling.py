"""Scaling on this machine: the demo evaluation (gold, every instance really run) with 1 and with 2 workers, and the
ratio of their wall times. Run:

    python benchmarks/scaling.py [--runs 5] [--runner threads|dask] [--json out.json]

`threads` (default) is what `pbench evaluate --max-workers N` uses (Prefect's thread pool); `dask` is a local Dask
cluster of N single-threaded worker processes (what `pbench evaluate --dask-workers N` starts). The flow runs in
this process; Prefect's ephemeral server is started before the first measurement (a no-op flow), so that no
configuration pays for it. Each measurement starts with an empty verdict cache; the two configurations alternate
(1-2, 2-1, 1-2, ...) so that a drift in the machine's load weighs on both. Images are warm (content-keyed, shared).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import _bench


def measure(workers: int, runner: str, tag: str) -> float:
    from flows.evaluation import run_evaluation

    shutil.rmtree(Path(os.environ["PBENCH_CACHE_DIR"]) / "verdicts", ignore_errors=True)
    kwargs = {"dask_workers": workers} if runner == "dask" else {"max_workers": workers}
    start = time.monotonic()
    report = run_evaluation(
        **kwargs,
        dataset="demo",
        predictions="gold",
        model=f"bench-{workers}w",
        model_cutoff="2025-06-01",
        run_id=f"bench-scaling-{runner}-{workers}w-{tag}",
    )
    elapsed = time.monotonic() - start
    if report["resolved"] != report["total"]:
        raise SystemExit(f"not every instance resolved with {workers} worker(s): {report['instances']}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runner", choices=("threads", "dask"), default="threads")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = _bench.use_scratch(args.scratch, "scaling")
    _bench.ensure_demo_season(root)
    from prefect import flow

    from tasks_lib import prefect_env

    prefect_env.configure()
    flow(name="bench-warm-up")(lambda: None)()  # starts the ephemeral server outside the measurements

    times: dict[int, list[float]] = {1: [], 2: []}
    loads: list[float] = []
    stamp = time.strftime("%H%M%S")
    for i in range(args.runs):
        for workers in (1, 2) if i % 2 == 0 else (2, 1):
            secs = measure(workers, args.runner, f"{stamp}-{i}")
            times[workers].append(secs)
            loads.append(_bench.load())
            print(f"run {i + 1}, {workers} worker(s): {secs:.1f}s, load {loads[-1]:.1f}", flush=True)
    ratios = [a / b for a, b in zip(times[1], times[2], strict=True)]
    print()
    print(
        _bench.table(
            ["configuration", "median s", "runs"],
            [
                [f"{w} worker(s), {args.runner}", _bench.median(t), _bench.runs_text(t, "{:.1f}")]
                for w, t in times.items()
            ],
        )
    )
    print(
        f"\nspeed-up 2 vs 1 workers: {_bench.median(times[1]) / _bench.median(times[2]):.2f}x (ratio of medians); "
        f"per-round ratios {_bench.runs_text(ratios)}; load {min(loads):.1f}-{max(loads):.1f}"
    )
    _bench.save_json(args.json, {"runs": args.runs, "runner": args.runner, "times": times, "loads": loads})


if __name__ == "__main__":
    main()
