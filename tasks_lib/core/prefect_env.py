"""Prefect settings the project relies on, applied before Prefect is imported (by the CLI, not at import)."""

from __future__ import annotations

import os

from tasks_lib.core import paths


def configure() -> None:
    """Results persisted under the project's cache so reruns hit it; the ephemeral server stays the default."""
    os.environ.setdefault("PREFECT_LOCAL_STORAGE_PATH", storage_path())
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # The ephemeral API server needs ~10 s to start on 2 busy cores; 20 s (the default) is too tight.
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def storage_path() -> str:
    """Where Prefect keeps the project's cached task results (the extraction cache)."""
    return os.environ.get("PREFECT_LOCAL_STORAGE_PATH") or str(paths.cache_dir() / "prefect-storage")


_SAVED: dict[str, str] = {}


def result_storage() -> str:
    """The cached tasks' result storage, set on the task itself (a saved block of the API in use, named after
    the folder): a worker's flow-run process has Prefect's settings fixed before the flow module is imported,
    so only this makes a deployment run read and write the same cache as the CLI (which sets
    PREFECT_LOCAL_STORAGE_PATH to the same folder). Call inside a flow run."""
    import hashlib

    path = storage_path()
    if path not in _SAVED:
        from prefect.filesystems import LocalFileSystem

        name = "pbench-cache-" + hashlib.sha256(path.encode()).hexdigest()[:12]
        LocalFileSystem(basepath=path).save(name, overwrite=True)
        _SAVED[path] = f"local-file-system/{name}"
    return _SAVED[path]
