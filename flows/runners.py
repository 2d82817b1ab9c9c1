"""Task runners for the fan-out stages: threads on one machine, or a Dask cluster of several machines.

On Dask, each worker runs its tasks against its own Docker engine (`docker.from_env()` on that machine) and
writes runs, seasons and logs under PBENCH_OUTPUT_DIR, which must be storage that the flow and every worker can
reach (a shared path). Image builds and verdict caches stay per machine: image ids are local to an engine.
"""

from __future__ import annotations


def task_runner(max_workers: int = 2, dask_address: str | None = None, dask_workers: int | None = None):
    if dask_address or dask_workers:
        from prefect_dask import DaskTaskRunner

        if dask_address:
            return DaskTaskRunner(address=dask_address)
        # A local cluster: one process per worker, one thread each (each holds one Docker stack at a time).
        return DaskTaskRunner(
            cluster_kwargs={
                "n_workers": dask_workers,
                "threads_per_worker": 1,
                "processes": True,
                "dashboard_address": None,
            }
        )
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=max(1, max_workers))
