"""Curation of a whole season, everything counted: its wall time ÷ its valid instances (issue 19's "minutes per
valid instance"). Runs `pbench curate` once from empty output and cache folders (images stay: they are keyed by
content), reads the machine's busy CPU time before and after (as scaling.py does), and summarizes the season's
own logs:

    python benchmarks/season.py --season template --prs-file ../shared/reference/fastapi-template/prs.jsonl \
        --mirror "$PBENCH_MIRRORS/fastapi+full-stack-fastapi-template/repo" [--max-concurrency 2] [--json out.json]

    python benchmarks/season.py --summarize SCRATCH --season template   # a run already made under SCRATCH

The summary: wall, mean busy cores, valid instances, minutes per valid instance, the environment images the run
built (each run's `run.json` says whether its image was built, and in how long), and one row per PR (status,
sides, runs, list sizes, flaky tests, seconds). One run per call: a season takes ~40 minutes here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import _bench
from scaling import busy_seconds


def summarize(season_dir: Path) -> dict:
    """What the season's folder says: valid instances, images built, one row per extracted PR."""
    built = []
    for run_json in sorted(season_dir.glob("logs/pr-*/*/run.json")):
        run = json.loads(run_json.read_text())
        if run.get("image_built"):
            built.append(round(run["timings"]["image_s"], 1))
    rows = []
    for path in season_dir.glob("logs/pr-*/extraction.json"):
        e = json.loads(path.read_text())
        rows.append(
            {
                "pr": e["number"],
                "status": e["status"],
                "sides": e["sides"],
                "head_runs": e["head_runs"],
                "base_runs": e["base_runs"],
                "f2p": e["f2p_count"],
                "p2p": e["p2p_count"],
                "flaky": len(e["flaky_tests"]),
                "duration_s": e["duration_s"],
            }
        )
    instances = season_dir / "instances.jsonl"
    valid = sum(1 for line in instances.read_text().splitlines() if line.strip()) if instances.exists() else 0
    return {
        "valid": valid,
        "images_built": len(built),
        "images_built_s": built,
        "extraction_s_sum": round(sum(r["duration_s"] for r in rows), 1),
        "extractions": sorted(rows, key=lambda r: r["pr"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--season", required=True)
    ap.add_argument("--prs-file")
    ap.add_argument("--mirror")
    ap.add_argument("--max-concurrency", type=int, default=2)
    ap.add_argument("--scratch", type=Path, default=_bench.DEFAULT_SCRATCH / "season")
    ap.add_argument("--summarize", type=Path, help="summarize a run already made under this scratch folder")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.summarize:
        out = summarize(args.summarize / "out" / "seasons" / args.season)
    else:
        root = _bench.use_scratch(args.scratch, "season", fresh=True)
        cmd = [str(_bench.PBENCH), "curate", "--season", args.season]
        cmd += ["--max-concurrency", str(args.max_concurrency)]
        cmd += ["--prs-file", args.prs_file] if args.prs_file else []
        cmd += ["--mirror", args.mirror] if args.mirror else []
        start_utc, load = datetime.now(UTC).isoformat(timespec="seconds"), _bench.load()
        busy, t0 = busy_seconds(), time.monotonic()
        with open(root / "curate.log", "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
        wall = time.monotonic() - t0
        busy = busy_seconds() - busy
        out = {
            "command": " ".join(cmd),
            "exit_code": rc,
            "start_utc": start_utc,
            "end_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_at_start": round(load, 2),
            "wall_s": round(wall, 1),
            "mean_busy_cores": round(busy / wall, 2),
            **summarize(root / "out" / "seasons" / args.season),
        }
        out["min_per_valid"] = round(wall / 60 / out["valid"], 2) if out["valid"] else None
    print(json.dumps({k: v for k, v in out.items() if k != "extractions"}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
