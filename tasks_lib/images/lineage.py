"""Environment images built on each other, and what they cost: the delta-build parent of a new lock, the build
ledger, disk and build time per source (`pbench images usage`)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping

from tasks_lib.core import docker_client, paths

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


def image_rows() -> list[dict]:
    """One row per environment image on this machine: tag, source, side, the parent it was built on (delta),
    the disk it adds (`adds_mb`) and its build time (this machine's ledger; 0 for an image built before the
    ledger or on another machine).

    `adds_mb` is the image's size beyond the longest run of leading layers it shares with an image of its
    source and side counted before it (in build order) or with an image the harness bootstraps (base,
    Postgres): a delta image adds its own layers, and so does each sibling built FROM the same toolchain
    stage (frontend images: Debian's Chromium and Node once, each lock's dependencies per image). Summed over
    a source and side it is the disk of its images with every shared layer counted once. The size of a shared
    run of layers is that of the image (intermediate ones of the legacy builder included) whose layers are
    exactly that run; where none is left, the longest shorter run that has one (counts more, never less)."""
    client = docker_client.get()
    ledger_rows: dict[str, dict] = {}
    with contextlib.suppress(OSError):
        for line in (paths.cache_dir() / "build-logs" / "builds.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError):
                row = json.loads(line)
                ledger_rows[row["tag"]] = row
    every = client.images.list(all=True)
    size_of = {_layers(i): i.attrs.get("Size", 0) for i in every}
    harness = [_layers(i) for i in every if i.tags and not any(t.startswith(ENV_REPO_PREFIX) for t in i.tags)]
    rows = []
    for image in every:
        labels = image.labels or {}
        tags = [t for t in image.tags if t.startswith(ENV_REPO_PREFIX)]
        if KEY_LABEL not in labels or not tags:
            continue
        # Images built before these labels: source and side from the tag (pbench/env-<source>-<side>).
        named, _, side_of_tag = tags[0].split(":")[0][len(ENV_REPO_PREFIX) + 1 :].rpartition("-")
        built = [ledger_rows[t] for t in tags if t in ledger_rows]
        row = {
            "tag": tags[0],
            "source": labels.get(SOURCE_LABEL) or named,
            "side": labels.get(SIDE_LABEL) or side_of_tag,
            "parent": labels.get(PARENT_LABEL, ""),
            "depth": int(labels.get(DEPTH_LABEL, "0") or 0),
            "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
            "build_s": sum(r["seconds"] for r in built),
            "built_at": built[-1]["at"] if built else "",
        }
        rows.append((row, image.attrs.get("Created", ""), _layers(image), image.attrs.get("Size", 0)))
    rows.sort(key=lambda r: (r[0]["source"], r[0]["side"], r[0]["built_at"] or r[1], r[0]["tag"]))
    counted: dict[tuple[str, str], list[tuple[str, ...]]] = {}
    for row, _, layers, size in rows:
        seen = counted.setdefault((row["source"], row["side"]), list(harness))
        shared = max((_common(layers, other) for other in seen), default=0)
        below = next((size_of[layers[:n]] for n in range(shared, 0, -1) if layers[:n] in size_of), 0)
        row["adds_mb"] = round((size - below) / 2**20, 1)
        seen.append(layers)
    return [row for row, *_ in rows]


def _layers(image) -> tuple[str, ...]:
    return tuple(image.attrs.get("RootFS", {}).get("Layers") or ())


def _common(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many leading layers two images share (a proper prefix of `a` at most)."""
    n = 0
    for x, y in zip(a[:-1], b, strict=False):
        if x != y:
            break
        n += 1
    return n


def usage() -> list[dict]:
    """Environment images per source: how many, how many built on a parent, build time (this machine's
    ledger), disk: what its images add to the base image, each shared layer counted once (`image_rows`)."""
    out: dict[str, dict] = {}
    for image in image_rows():
        row = out.setdefault(
            f"{image['source']} {image['side']}".strip(),
            {
                "source": image["source"],
                "side": image["side"],
                "images": 0,
                "delta": 0,
                "unique_mb": 0.0,
                "build_s": 0.0,
            },
        )
        row["images"] += 1
        row["delta"] += bool(image["parent"])
        row["unique_mb"] += image["adds_mb"]
        row["build_s"] += image["build_s"]
    return sorted(out.values(), key=lambda r: (r["source"], r["side"]))
