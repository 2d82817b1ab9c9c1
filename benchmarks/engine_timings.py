"""Where the time of one engine run goes, on the demo feature PR (base side and head side), and how long a
second "build" of an unchanged lock takes (a cache hit). Run: python benchmarks/engine_timings.py [--runs 3]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import json

    from tasks_lib import engine
    from tasks_lib.formats import patches
    from tasks_lib.images import build as images
    from tasks_lib.sources import gitops, repos
    from tasks_lib.sources.demo_repo import DEMO_PRS, demo_prs_path, ensure_demo_repo
    from tasks_lib.sources.record import load_source

    source = load_source("demo")
    repo = repos.repo_dir(source)
    prs = {
        json.loads(x)["number"]: json.loads(x)
        for x in demo_prs_path(ensure_demo_repo()).read_text().splitlines()
    }
    head = prs[DEMO_PRS["feature"]]["mergeCommit"]["oid"]
    base = gitops.first_parent(repo, head)
    split = patches.split_patch(gitops.diff(repo, base, head), source)

    spec = images.backend_env_spec(source, images.dependency_contents(source, repo, base))
    images.ensure_env_image(spec)
    t0 = time.monotonic()
    ref = images.ensure_env_image(spec)
    print(f"unchanged lock: built={ref.built} in {time.monotonic() - t0:.2f}s ({ref.tag})")

    chain = (engine.PatchInput("gold", split.patch), engine.PatchInput("test_patch", split.test_patch))
    rows = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            res = engine.run_tests(engine.RunRequest(source, repo, base, Path(tmp) / "run", chain))
            rows.append(res.timings)
    keys = [
        "image_s",
        "services_s",
        "copy_s",
        "snapshot_s",
        "patch_s",
        "prestart_s",
        "test_s",
        "container_s",
        "total_s",
    ]
    for k in keys:
        vals = [r.get(k, 0.0) for r in rows]
        print(f"{k:12} median {statistics.median(vals):6.2f}s  (runs: {', '.join(f'{v:.2f}' for v in vals)})")


if __name__ == "__main__":
    main()
