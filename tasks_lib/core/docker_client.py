"""The one place that talks to the Docker daemon's address. Never passed into cached tasks."""

from __future__ import annotations

import os
import threading

from tasks_lib.core.config import Settings
from tasks_lib.core.errors import InfraError

_lock = threading.Lock()
_client = None


def get():
    """A shared docker SDK client (thread-safe for our use), created on first call."""
    global _client
    with _lock:
        if _client is None:
            import docker

            try:
                client = docker.from_env(timeout=Settings.from_env().docker_timeout_s)
                client.ping()
            except Exception as exc:
                raise InfraError(f"cannot reach the Docker engine ({exc}); is dockerd running?") from exc
            _client = client
        return _client


def reset() -> None:
    global _client
    with _lock:
        _client = None


def engine() -> str:
    """Which engine this process talks to: `DOCKER_HOST`, or "" for the default socket. Several engines may
    serve one machine (a Dask worker per engine): the build ledger and a verdict's `executed_by` name it."""
    return os.environ.get("DOCKER_HOST", "")
