"""Environment images built on each other, and what they cost: the delta-build parent of a new lock, the build
ledger, disk and build time per source (`pbench images usage`)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping

from tasks_lib import docker_client, paths

log = logging.getLogger(__name__)

KEY_LABEL = "io.prototypebench.key"
ENV_REPO_PREFIX = "pbench/env"

# A delta build: the image of a new lock starts from the environment image of the same source and recipe
# whose packages differ least, and the installer (uv sync, exact: it removes what the new lock lacks) installs
# the difference. Same key and tag as a build from scratch; the parent is a label and a line of the build log.
SOURCE_LABEL = "io.prototypebench.source"
SIDE_LABEL = "io.prototypebench.side"
RECIPE_LABEL = "io.prototypebench.recipe"
PACKAGES_LABEL = "io.prototypebench.packages"
PARENT_LABEL = "io.prototypebench.parent"
DEPTH_LABEL = "io.prototypebench.depth"
MAX_DELTA_DEPTH = 8  # layers grow with every delta; past this a build starts from the base image again


def delta_parent(client, spec, recipe: str, packages: set[str]) -> tuple[dict, dict]:
    """(build args, labels) of the nearest image to build on, or ({}, depth 0) for a build from scratch."""
    best = None
    for image in client.images.list(filters={"label": [f"{RECIPE_LABEL}={recipe}"]}):
        labels = image.labels or {}
        if labels.get(SOURCE_LABEL) != spec.source or not image.tags:
            continue
        depth = int(labels.get(DEPTH_LABEL, "0") or 0)
        if depth >= MAX_DELTA_DEPTH:
            continue
        theirs = set((labels.get(PACKAGES_LABEL) or "").split())
        distance = len(theirs ^ packages)
        if distance * 2 < len(packages) and (best is None or distance < best[0]):
            best = (distance, image.tags[0], depth)
    if best is None:
        return {}, {DEPTH_LABEL: "0"}
    distance, tag, depth = best
    log.info("delta build of %s from %s (%d package(s) differ)", spec.source, tag, distance)
    return {"BASE": tag}, {PARENT_LABEL: tag, DEPTH_LABEL: str(depth + 1)}


def ledger(tag: str, key: str, seconds: float, labels: Mapping[str, str]) -> None:
    """One line per image built (`pbench images usage` reads it): what, how long, on which parent."""
    row = {
        "tag": tag,
        "key": key,
        "seconds": round(seconds, 1),
        "source": labels.get(SOURCE_LABEL, ""),
        "parent": labels.get(PARENT_LABEL, ""),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = paths.cache_dir() / "build-logs" / "builds.jsonl"
    with contextlib.suppress(OSError), open(path, "a") as fh:
        fh.write(json.dumps(row) + "\n")


def usage() -> list[dict]:
    """Environment images per source: how many, how many built on a parent, build time (this machine's
    ledger), disk: the sum of what each image adds beyond the layers it shares (Docker's SharedSize)."""
    client = docker_client.get()
    seconds: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in (paths.cache_dir() / "build-logs" / "builds.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                seconds[row["tag"]] = row["seconds"]
    out: dict[str, dict] = {}
    for image in client.df().get("Images") or []:
        labels = image.get("Labels") or {}
        if KEY_LABEL not in labels or not any(
            t.startswith(ENV_REPO_PREFIX) for t in image.get("RepoTags") or []
        ):
            continue
        # Images built before these labels: source and side from the tag (pbench/env-<source>-<side>).
        named, _, side_of_tag = image["RepoTags"][0].split(":")[0][len(ENV_REPO_PREFIX) + 1 :].rpartition("-")
        source = labels.get(SOURCE_LABEL) or named
        side = labels.get(SIDE_LABEL) or side_of_tag
        row = out.setdefault(
            f"{source} {side}".strip(),
            {"source": source, "side": side, "images": 0, "delta": 0, "unique_mb": 0.0, "build_s": 0.0},
        )
        row["images"] += 1
        row["delta"] += PARENT_LABEL in labels
        shared = max(image.get("SharedSize") or 0, 0)
        row["unique_mb"] += round((image.get("Size", 0) - shared) / 2**20, 1)
        row["build_s"] += sum(seconds.get(t, 0.0) for t in image.get("RepoTags") or [])
    return sorted(out.values(), key=lambda r: (r["source"], r["side"]))
