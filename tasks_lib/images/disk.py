"""The engine's disk, seen from a build: a build that fails because the disk is full (or because the daemon
went away) is the host's trouble, never the commit's or the patch's.

Without this, a season on a nearly full disk records `image_build_failed` for the PR whose image happened to be
built last, and keeps that outcome under its key for good; an evaluation blames the agent's dependency change
(`PatchBuildError`). Both now raise `InfraError`: retried, never kept, never a verdict on the patch.
"""

from __future__ import annotations

import os
import shutil

from tasks_lib.core.errors import InfraError

# What the daemon, a package manager or the kernel says when the disk (or a quota) is exhausted.
DISK_FULL_MARKERS = ("no space left on device", "enospc", "disk quota exceeded")


def says_disk_full(text: str) -> bool:
    low = text.lower()
    return any(marker in low for marker in DISK_FULL_MARKERS)


def require_free(client, what: str, min_free_gb: float) -> None:
    """Refuse a build when the engine's data root has less than `min_free_gb` free (PBENCH_MIN_FREE_GB).

    Only where the data root is visible from here (a local engine); a remote engine's disk is its own, and a
    build there that runs out of it is still caught by its log (`says_disk_full`)."""
    if min_free_gb <= 0:
        return
    try:
        root = client.info().get("DockerRootDir") or ""
    except Exception:  # an unreachable daemon fails the build itself, with its own message
        return
    if not root or not os.path.isdir(root):
        return
    free = shutil.disk_usage(root).free
    if free < min_free_gb * 2**30:
        raise InfraError(
            f"building {what}: the Docker engine's disk ({root}) has {free / 2**30:.1f} GB free, under the "
            f"{min_free_gb:g} GB a build is given (PBENCH_MIN_FREE_GB); free some with "
            "`pbench images prune --older-than-days N` (a pruned image is rebuilt from its lock when needed)"
        )
