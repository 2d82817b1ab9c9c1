"""Prefect global concurrency limits: Docker slots per host and the GitHub API budget.

`ensure_limits()` (run by `./dev setup` through `pbench limits`) creates them on the Prefect API in use.
Code that starts containers takes a Docker slot of its host; the GitHub crawl takes a rate-limit slot per
pull request it fetches. Both are non-strict: where the limits were never created (a bare ephemeral server),
they are no-ops, so a missing limit never blocks work; where they exist, parallel flows cannot oversubscribe
a machine or the API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys

GITHUB_LIMIT = "pbench-github-api"


def docker_limit_name(host: str | None = None) -> str:
    host = host or os.environ.get("PBENCH_DOCKER_HOST_NAME") or socket.gethostname()
    return "pbench-docker-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in host)


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


@contextlib.contextmanager
def docker_slot():
    """Hold one Docker slot of this host while a run's containers live."""
    if not _in_prefect_run():
        yield
        return
    from prefect.concurrency.sync import concurrency

    with concurrency(docker_limit_name(), occupy=1, strict=False):
        yield


def github_call(requests: int = 1) -> None:
    """Wait for `requests` slots of the GitHub API budget (a rate limit: slots decay, they are not released)."""
    if not _in_prefect_run():
        return
    from prefect.concurrency.sync import rate_limit

    rate_limit(GITHUB_LIMIT, occupy=max(1, requests), strict=False)


def ensure_limits(docker_slots: int = 2, github_per_hour: int = 4000) -> dict[str, dict]:
    """Create or update both limits on the current Prefect API; returns what is now configured."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    wanted = {
        docker_limit_name(): {"limit": docker_slots, "slot_decay_per_second": 0.0},
        GITHUB_LIMIT: {
            "limit": max(1, github_per_hour // 60),
            "slot_decay_per_second": github_per_hour / 3600,
        },
    }
    with get_client(sync_client=True) as client:
        for name, spec in wanted.items():
            try:
                client.read_global_concurrency_limit_by_name(name)
                client.update_global_concurrency_limit(
                    name, GlobalConcurrencyLimitUpdate(active=True, **spec)
                )
            except ObjectNotFound:
                client.create_global_concurrency_limit(
                    GlobalConcurrencyLimitCreate(name=name, active=True, **spec)
                )
        return {
            name: client.read_global_concurrency_limit_by_name(name).model_dump(
                include={"limit", "slot_decay_per_second", "active"}
            )
            for name in wanted
        }
