"""Environment images built on each other, and what they cost: the delta-build parent of a new lock, the build
ledger, disk and build time per source (`pbench images usage`); the harness's images on this engine (list,
prune)."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Mapping

from tasks_lib.core import docker_client, paths

log = logging.getLogger(__name__)

KEY_LABEL = "io.prototypebench.key"
ENV_REPO_PREFIX = "pbench/env"
# What every environment image starts from, in the order a machine needs them (each keyed on the one before).
ROOTFS_REPO = "pbench/rootfs"
BASE_REPO = "pbench/base"
POSTGRES_REPO = "pbench/postgres"

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


def ledger(
    tag: str, key: str, seconds: float, labels: Mapping[str, str], kind: str = "build", digest: str = ""
) -> None:
    """One line per image built, pulled from or pushed to the registry (`kind`; `pbench images usage` reads
    it): what, how long, on which parent, by which engine (`DOCKER_HOST`, "" for the default one: several
    engines may share a cache folder), the registry's digest of a pull or push."""
    row = {
        "tag": tag,
        "key": key,
        "seconds": round(seconds, 1),
        "source": labels.get(SOURCE_LABEL, ""),
        "parent": labels.get(PARENT_LABEL, ""),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kind": kind,
        "engine": docker_client.engine(),
        "host": socket.gethostname(),
    }
    if digest:
        row["digest"] = digest
    path = paths.cache_dir() / "build-logs" / "builds.jsonl"
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")


def ledger_rows(this_engine: bool = False) -> list[dict]:
    """The ledger's rows in order (`kind` build, pull or push). `this_engine`: only this host's rows of the
    engine this process talks to (rows written before engines were recorded count as the default engine's)."""
    out = []
    here = (socket.gethostname(), docker_client.engine())
    with contextlib.suppress(OSError):
        for line in (paths.cache_dir() / "build-logs" / "builds.jsonl").read_text().splitlines():
            with contextlib.suppress(ValueError, TypeError):
                row = {"kind": "build", "engine": "", "host": here[0], **json.loads(line)}
                if not this_engine or (row["host"], row["engine"]) == here:
                    out.append(row)
    return out


def image_rows() -> list[dict]:
    """One row per environment image on this machine: tag, source, side, the parent it was built on (delta),
    the disk it adds (`adds_mb`), its build time and its pull time (this engine's rows of the ledger; 0 for an
    image built before the ledger, or on another machine and pulled: its `pull_s`).

    `adds_mb` is the image's size beyond the longest run of leading layers it shares with an image of its
    source and side counted before it (in build order) or with an image the harness bootstraps (base,
    Postgres): a delta image adds its own layers, and so does each sibling built FROM the same toolchain
    stage (frontend images: Debian's Chromium and Node once, each lock's dependencies per image). Summed over
    a source and side it is the disk of its images with every shared layer counted once. The size of a shared
    run of layers is that of the image (intermediate ones of the legacy builder included) whose layers are
    exactly that run; where none is left, the longest shorter run that has one (counts more, never less)."""
    client = docker_client.get()
    mine = ledger_rows(this_engine=True)
    built_by_tag = {r["tag"]: r for r in mine if r["kind"] == "build"}
    pulled_by_tag = {r["tag"]: r for r in mine if r["kind"] == "pull"}
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
        built = [built_by_tag[t] for t in tags if t in built_by_tag]
        pulled = [pulled_by_tag[t] for t in tags if t in pulled_by_tag]
        row = {
            "tag": tags[0],
            "source": labels.get(SOURCE_LABEL) or named,
            "side": labels.get(SIDE_LABEL) or side_of_tag,
            "parent": labels.get(PARENT_LABEL, ""),
            "depth": int(labels.get(DEPTH_LABEL, "0") or 0),
            "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
            "build_s": sum(r["seconds"] for r in built),
            "built_at": built[-1]["at"] if built else "",
            "pulled": bool(pulled),
            "pull_s": sum(r["seconds"] for r in pulled),
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
    """Environment images per source: how many, how many built on a parent, build time, how many pulled from
    the registry and their pull time (this engine's ledger rows), disk: what its images add to the base image, each shared layer counted once (`image_rows`)."""
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
                "pulled": 0,
                "pull_s": 0.0,
            },
        )
        row["images"] += 1
        row["delta"] += bool(image["parent"])
        row["unique_mb"] += image["adds_mb"]
        row["build_s"] += image["build_s"]
        row["pulled"] += image["pulled"]
        row["pull_s"] += image["pull_s"]
    return sorted(out.values(), key=lambda r: (r["source"], r["side"]))


def list_images() -> list[dict]:
    client = docker_client.get()
    out = []
    for image in client.images.list(filters={"label": KEY_LABEL}):
        out.append(
            {
                "tags": image.tags,
                "id": image.id,
                "key": image.labels.get(KEY_LABEL),
                "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
            }
        )
    return sorted(out, key=lambda r: json.dumps(r["tags"]))


def prune_env_images(older_than_days: float = 30.0, dry_run: bool = False) -> list[dict]:
    """Remove environment images not used for `older_than_days` (base, rootfs and Postgres stay).

    "Used" is the image's last tag time or creation, whichever is later; a run that needs a pruned image
    rebuilds it from its lock (same key, same tag), so pruning never changes a verdict, only costs a build.
    An image a container still holds (a season's run in progress, a container kept for debugging) stays: its
    row says so in `kept` (`removed` False), and the others are pruned all the same. Rows: every stale image.
    """
    import datetime as dt

    import docker.errors

    client = docker_client.get()
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=older_than_days)
    holders: dict[str, list[str]] = {}
    for container in client.containers.list(all=True):
        holders.setdefault(container.attrs.get("Image", ""), []).append(container.name)
    rows = []
    for image in client.images.list(filters={"label": KEY_LABEL}):
        if not any(t.startswith(ENV_REPO_PREFIX + "-") for t in image.tags):
            continue
        stamps = [image.attrs.get("Created", ""), (image.attrs.get("Metadata") or {}).get("LastTagTime", "")]
        last = max(
            dt.datetime.fromisoformat(s[:26].rstrip("Z") + "+00:00") for s in stamps if s and s[:4] > "0001"
        )
        if last >= cutoff:
            continue
        row = {
            "tags": image.tags,
            "id": image.id,
            "last_used": last.isoformat(timespec="seconds"),
            "size_mb": round(image.attrs.get("Size", 0) / 2**20, 1),
            "removed": False,
            "kept": "",
        }
        rows.append(row)
        if image.id in holders:
            row["kept"] = f"in use by container {', '.join(sorted(holders[image.id]))}"
            continue
        if dry_run:
            continue
        try:
            for tag in image.tags:
                client.images.remove(tag, noprune=False)
        except docker.errors.NotFound:  # another prune took it first: gone all the same
            pass
        except docker.errors.APIError as exc:  # 409: a container took it since the listing
            if exc.status_code != 409:
                raise
            row["kept"] = f"not removed: {exc.explanation or exc}"
            continue
        row["removed"] = True
    return rows


def harness_tags() -> list[str]:
    """Every tag of the harness's images on this engine, in the order a new machine needs them: the root
    filesystem, the base and Postgres images, the environment images (`pbench images push` with no tag)."""
    client = docker_client.get()
    tags = {t for image in client.images.list(filters={"reference": "pbench/*"}) for t in image.tags}
    order = (ROOTFS_REPO, BASE_REPO, POSTGRES_REPO, ENV_REPO_PREFIX)
    keep = [t for t in tags if t.split(":")[0] in order[:3] or t.startswith(ENV_REPO_PREFIX + "-")]
    return sorted(keep, key=lambda t: (next(i for i, p in enumerate(order) if t.startswith(p)), t))
