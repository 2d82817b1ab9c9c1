"""Image reuse over a corpus: environment images built versus distinct lock hashes (they must be equal), and the
time of a cold pass (every image built) versus a warm pass (nothing built). Run:

    python benchmarks/image_reuse.py [--runs 5] [--dataset demo] [--sides backend,frontend] [--json out.json]

The requests are every env image the harness asks for over the corpus: per instance, the backend image for the
base + test patch (extraction's base side, an empty patch) and for the base + gold patch + test patch (extraction's
head side, the gold patch), and the same two for the frontend where the instance has frontend tests.

Cold without deleting anybody's images: each run gives the requests a fresh nonce, an extra file under deps/ of the
build context (and a source name `<source>-bench`, so the tags read pbench/env-<source>-bench-<side>:<key>). The
nonce maps each lock to exactly one new key, so the counts are those of the real locks, and the dependency
install really runs (its layer follows `COPY deps/`); the layers before it (base image, frontend toolchain) come
from Docker's cache, as they do for any new lock on a machine that built one before. A warm pass then repeats the
same requests. The images a run built are removed at its end.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import uuid
from pathlib import Path

import _bench


def corpus_requests(instances: list[dict], sides: tuple[str, ...]) -> list[tuple[str, str, object]]:
    """(instance id, side, EnvSpec) for every image the harness asks for over the corpus."""
    from tasks_lib.core.constants import Side
    from tasks_lib.corpus import load as corpus
    from tasks_lib.images import build as images
    from tasks_lib.judge import evaluation

    out = []
    for inst in instances:
        source = corpus.source_for(inst)
        repo = evaluation.repo_for(source)
        for chain in ([inst["test_patch"]], [inst["patch"], inst["test_patch"]]):
            if "backend" in sides:
                deps = images.dependency_contents(source, repo, inst["base_commit"], chain)
                out.append((inst["instance_id"], "backend", images.backend_env_spec(source, deps)))
            if "frontend" in sides and any(evaluation._tests_of(inst, Side.FRONTEND)):
                deps = images.dependency_contents(source, repo, inst["base_commit"], chain, "frontend")
                out.append((inst["instance_id"], "frontend", images.frontend_env_spec(source, deps)))
    return out


def with_nonce(spec, nonce: str):
    return dataclasses.replace(
        spec,
        source=f"{spec.source}-bench",
        dependency_files=(*spec.dependency_files, ("pbench-bench-nonce", nonce.encode())),
    )


def one_pass(requests, nonce: str) -> dict:
    from tasks_lib.images import build as images

    start = time.monotonic()
    refs = []
    for iid, side, spec in requests:
        t0 = time.monotonic()
        ref = images.ensure_env_image(with_nonce(spec, nonce))
        refs.append(
            {
                "instance": iid,
                "side": side,
                "lock": spec.lock_sha,
                "tag": ref.tag,
                "built": ref.built,
                "seconds": time.monotonic() - t0,
            }
        )
    return {"seconds": time.monotonic() - start, "refs": refs}


def remove_images(tags: set[str]) -> None:
    from tasks_lib.core import docker_client

    client = docker_client.get()
    for tag in sorted(tags):
        if "-bench-" in tag:  # only what this script built
            client.images.remove(tag)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="cold + warm pass pairs (default 5)")
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--sides", default="backend,frontend")
    parser.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = _bench.use_scratch(args.scratch, "images")
    if args.dataset == "demo":
        _bench.ensure_demo_season(root)
    from tasks_lib.corpus import load as corpus

    sides = tuple(s for s in args.sides.split(",") if s)
    requests = corpus_requests(corpus.load_corpus(args.dataset), sides)
    locks = {side: {spec.lock_sha for _, s, spec in requests if s == side} for side in sides}
    print(
        f"{len(requests)} image requests over {args.dataset}; distinct lock hashes: "
        + ", ".join(f"{s} {len(v)}" for s, v in locks.items()),
        flush=True,
    )

    runs = []
    for i in range(args.runs):
        nonce = uuid.uuid4().hex
        cold = one_pass(requests, nonce)
        warm = one_pass(requests, nonce)
        try:
            for side in sides:
                built = sum(r["built"] for r in cold["refs"] if r["side"] == side)
                tags = {r["tag"] for r in cold["refs"] if r["side"] == side}
                if built != len(locks[side]) or len(tags) != len(locks[side]):
                    raise SystemExit(
                        f"run {i + 1}: {side}: built {built}, tags {len(tags)}, locks {len(locks[side])}"
                    )
            if any(r["built"] for r in warm["refs"]):
                raise SystemExit(
                    f"run {i + 1}: the warm pass built {sum(r['built'] for r in warm['refs'])} image(s)"
                )
        finally:
            remove_images({r["tag"] for r in cold["refs"] if r["built"]})
        run = {"cold": cold, "warm": warm, "load": _bench.load()}
        runs.append(run)
        print(
            f"run {i + 1}: cold pass {cold['seconds']:.1f}s ({sum(r['built'] for r in cold['refs'])} built), "
            f"warm pass {warm['seconds']:.2f}s (0 built), load {run['load']:.1f}",
            flush=True,
        )

    print()
    rows = []
    for side in sides:
        rows.append(
            [
                side,
                sum(1 for _, s, _ in requests if s == side),
                len(locks[side]),
                _bench.median(
                    [sum(r["built"] for r in run["cold"]["refs"] if r["side"] == side) for run in runs]
                ),
                0,
            ]
        )
    print(_bench.table(["side", "requests", "distinct locks", "built cold", "built warm"], rows))
    print()
    cold_build = {
        side: [r["seconds"] for run in runs for r in run["cold"]["refs"] if r["side"] == side and r["built"]]
        for side in sides
    }
    lookups = [r["seconds"] for run in runs for r in run["warm"]["refs"]]
    trows = [
        ["cold pass (every image built)", _bench.median([r["cold"]["seconds"] for r in runs])],
        ["warm pass (nothing built)", _bench.median([r["warm"]["seconds"] for r in runs])],
        *[[f"one cold {side} build", _bench.median(v)] for side, v in cold_build.items()],
        ["one warm lookup (ensure_env_image)", _bench.median(lookups)],
    ]
    print(_bench.table(["", "median s"], trows))
    loads = [r["load"] for r in runs]
    print(f"load {min(loads):.1f}-{max(loads):.1f}")
    _bench.save_json(args.json, {"runs": runs, "locks": {k: sorted(v) for k, v in locks.items()}})


if __name__ == "__main__":
    main()
