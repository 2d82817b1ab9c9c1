"""Wall time of the demo evaluation (gold) with the fan-out on a local Dask cluster of 1 and of 2 workers.

Each measurement uses a fresh verdict cache (so every instance really runs its containers) and the demo season
curated beforehand. Images are already built (they are keyed by content and shared). Run:

    python benchmarks/dask_speedup.py [--repeat 1]

Prints one line per configuration and the speed-up. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def measure(workers: int) -> float:
    from flows.evaluation import run_evaluation

    os.environ["PBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"pbench-bench-{workers}w-")
    start = time.monotonic()
    report = run_evaluation(
        dask_workers=workers,
        dataset="demo",
        predictions="gold",
        model=f"bench-{workers}w",
        model_cutoff="2025-06-01",
        run_id=f"bench-dask-{workers}w-{int(start)}",
    )
    elapsed = time.monotonic() - start
    assert report["resolved"] == report["total"], report
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    from tasks_lib import prefect_env

    prefect_env.configure()
    results = {}
    for workers in (1, 2):
        times = [measure(workers) for _ in range(args.repeat)]
        results[workers] = min(times)
        print(
            f"{workers} Dask worker(s): {', '.join(f'{t:.1f}s' for t in times)} (best {results[workers]:.1f}s)"
        )
    print(f"speed-up 2 vs 1 workers: {results[1] / results[2]:.2f}x")


if __name__ == "__main__":
    main()
