"""Task runners for the fan-out stages: threads on one machine, or a Dask cluster of several machines.

On Dask, each worker runs its tasks against its own Docker engine (`docker.from_env()` on that machine) and
writes runs, seasons and logs under PBENCH_OUTPUT_DIR, which must be storage that the flow and every worker can
reach (a shared path). Image builds and verdict caches stay per machine: image ids are local to an engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from prefect.task_runners import ThreadPoolTaskRunner

T = TypeVar("T")


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
    return lean_thread_pool(max_workers)


@contextmanager
def without_heartbeats() -> Iterator[None]:
    """A flow called in this process (the CLI, a benchmark) sends no heartbeats. Prefect's heartbeat thread
    emits an event when the flow starts, then sleeps in 1-second steps, and the flow's end joins it: 0-1 s at the
    end of every flow, ~0.65 s per flow in all on this machine (docs/performance.md, section 10). Heartbeats let
    a server's automations call a silent flow run crashed; an in-process run's ephemeral server ends with the
    process, and its user sees a crash. Runs started by a worker from a deployment keep Prefect's setting."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def lean_thread_pool(max_workers: int = 2) -> LeanThreadPoolTaskRunner:
    return LeanThreadPoolTaskRunner(max_workers=max(1, max_workers))


class LeanThreadPoolTaskRunner(ThreadPoolTaskRunner):
    """Prefect's thread pool, minus its one record per task run that outlives the run: the runner keeps a
    cancel event (an Event, its Condition, lock and deque) for every task it was ever given until the flow
    ends; here each is dropped when its task finishes, so a flow of 10,000 task runs does not hold 10,000 of
    them (docs/performance.md, section 5)."""

    def submit(self, task, parameters, wait_for=None, dependencies=None):
        future = super().submit(task, parameters, wait_for, dependencies)
        events = getattr(self, "_cancel_events", None)
        if isinstance(events, dict):
            task_run_id = future.task_run_id
            future.wrapped_future.add_done_callback(lambda _: events.pop(task_run_id, None))
        return future


def windowed(items: Iterable[T], submit: Callable[[T], object], limit: int) -> Iterator[tuple[T, object]]:
    """Submit `items` with at most `limit` task runs in flight, whatever the task runner's own size, and yield
    (item, future) as they finish. The flow, not the runner it was started with, decides its concurrency: a
    deployment run (whose runner is the flow's default) runs as many at once as the CLI does, and pending
    futures never pile up (memory stays flat over a long season)."""
    from prefect.futures import as_completed

    pending: dict[object, T] = {}
    queue = iter(items)

    def fill() -> None:
        while len(pending) < max(1, limit):
            item = next(queue, _END)
            if item is _END:
                return
            pending[submit(item)] = item

    fill()
    while pending:
        fut = next(as_completed(list(pending)))
        item = pending.pop(fut)
        fill()  # the next run starts before this result is handled
        yield item, fut


_END = object()
