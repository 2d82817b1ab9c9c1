"""The demo's planted flaky test through the curation step that catches it, N times in a row (issue 34).

Each round extracts the demo's "flaky" PR exactly as the curation flow does (`extraction.extract`: three head
runs, two base runs, in real containers) into a fresh log folder, and checks what
tests/integration/test_curation_demo.py::test_flaky_test_is_in_neither_list_and_reported checks: the flaky list
is exactly the planted copies whose recorded outcomes changed between runs of one side, at least one did, and
no planted copy is in either list. Prints one line per round and a JSON summary; exit 1 at the first failed
round.

    .venv/bin/python scripts/flaky_loop.py --rounds 20 [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks_lib.curation import extraction
from tasks_lib.judge import evaluation
from tasks_lib.sources import (
    demo_repo,
    gitops,  # noqa: E402
)
from tasks_lib.sources.record import load_source  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="Log folders (default: a temporary folder).")
    parser.add_argument("--json", type=Path, default=None, help="Write the summary here too.")
    args = parser.parse_args()
    source = load_source("demo")
    repo = evaluation.repo_for(source)
    number = demo_repo.DEMO_PRS["flaky"]
    pr = next(
        r
        for r in map(
            json.loads, demo_repo.demo_prs_path(demo_repo.ensure_demo_repo()).read_text().splitlines()
        )
        if r["number"] == number
    )
    head = pr["mergeCommit"]["oid"]
    base = gitops.first_parent(repo, head)  # what the curation's crawl resolves as the PR's base
    out = args.out or Path(tempfile.mkdtemp(prefix="pbench-flaky-loop-"))
    rounds = []
    for i in range(1, args.rounds + 1):
        t0 = time.monotonic()
        log_dir = out / f"round-{i:02d}"
        result = extraction.extract(source, repo, number, base, head, log_dir)
        changed = extraction.changed_between_runs(log_dir, demo_repo.FLAKY_TEST_IDS)
        flagged = set(result.flaky_tests)
        listed = set(result.backend_fail_to_pass + result.backend_pass_to_pass)
        ok = (
            str(result.status) == "ok"
            and flagged == changed
            and bool(flagged)
            and not listed & set(demo_repo.FLAKY_TEST_IDS)
        )
        rounds.append(
            {
                "round": i,
                "ok": ok,
                "status": str(result.status),
                "flaky": sorted(flagged),
                "changed": sorted(changed),
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
        print(
            f"round {i:2d}: {'ok' if ok else 'FAILED'}  status {result.status}  "
            f"flaky {len(flagged)}/{len(demo_repo.FLAKY_TEST_IDS)} (changed {len(changed)})  "
            f"{rounds[-1]['seconds']:.0f}s",
            flush=True,
        )
        if not ok:
            break
    summary = {
        "pr": number,
        "rounds": rounds,
        "passed_in_a_row": _in_a_row(rounds),
        "miss_bound": demo_repo.FLAKY_MISS_BOUND,
        "log_dir": str(out),
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0 if all(r["ok"] for r in rounds) and len(rounds) == args.rounds else 1


def _in_a_row(rounds: list[dict]) -> int:
    n = 0
    for r in rounds:
        if not r["ok"]:
            break
        n += 1
    return n


if __name__ == "__main__":
    sys.exit(main())
