"""Prefect settings the project relies on, applied before Prefect is imported (by the CLI, not at import)."""

from __future__ import annotations

import os

from tasks_lib import paths


def configure() -> None:
    """Results persisted under the project's cache so reruns hit it; the ephemeral server stays the default."""
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", str(paths.cache_dir() / "prefect-storage"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # The ephemeral API server needs ~10 s to start on 2 busy cores; 20 s (the default) is too tight.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")
