"""PR by PR, a published corpus's FAIL_TO_PASS against what `pbench curate` extracted.

    python scripts/compare_published.py --report REPORT.jsonl [--published INSTANCES.jsonl ...] \
        --season mcp-context-forge-v0.1 [--corpus v0.2] [--json out.json]

REPORT (repeatable): the published extraction report (one row per PR: `pr`, `instance_id`, `status`, `f2p`); its `exact`
rows are the published instances. INSTANCES: published instance records, where they exist (their lists compared
test by test; elsewhere only the counts can be); one without a report row counts as published. Ours: the season's extraction (`extraction.parquet` of its
source folders), else the instance in `--corpus` (an earlier season's record). Per PR: `identical` (same
list, or same count where the published list is not available), `differs`, or our status when we have no
instance (`filtered: ...`, `no_fail_to_pass`, ...). Prints a Markdown table and the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks_lib.corpus import load as corpus
from tasks_lib.curation import plan as season_plan  # noqa: E402
from tasks_lib.curation import stages as curation
from tasks_lib.curation.season import load_season  # noqa: E402
from tasks_lib.sources.record import load_source  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _f2p(record: dict) -> list[str]:
    value = record.get("fail_to_pass", record.get("FAIL_TO_PASS"))
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, dict):
        return sorted(value.get("backend", []) + value.get("frontend", []))
    return sorted(value or [])


def ours_from_season(season: str) -> dict[int, dict]:
    import pyarrow.parquet as pq

    spec = load_season(season)
    found: dict[int, dict] = {}
    for name in spec.sources:
        out = season_plan.source_out_dir(spec, name)
        path = out / "extraction.parquet"
        if path.is_file():
            for row in pq.read_table(path).to_pylist():
                tests = sorted(list(row["backend_fail_to_pass"]) + list(row["frontend_fail_to_pass"]))
                found[row["number"]] = {"status": row["status"], "f2p": tests, "from": f"season {season}"}
        if spec.prs and (out / "filter.parquet").is_file():
            for number, why in curation.listed_not_kept(load_source(name), out, spec.prs, spec.waive).items():
                found[number] = {"status": why, "f2p": [], "from": f"season {season}"}
    return found


def compare(report: list[dict], published: dict[str, dict], ours: dict[int, dict], older: dict) -> list[dict]:
    rows = []
    listed = [r for r in report if r["status"] == "exact"]
    reported = {r["instance_id"] for r in listed}
    listed += [  # published instances without a report row (a source published without one)
        {"pr": r["pr_number"], "instance_id": i, "status": "exact", "f2p": len(_f2p(r))}
        for i, r in published.items()
        if i not in reported
    ]
    for rep in listed:
        pub = published.get(rep["instance_id"])
        pub_tests = _f2p(pub) if pub else None
        mine = ours.get(rep["pr"])
        if mine is None and rep["instance_id"] in older:
            mine = {"status": "ok", "f2p": _f2p(older[rep["instance_id"]]), "from": "corpus"}
        row = {"pr": rep["pr"], "published": rep["f2p"], "by": "list" if pub else "count"}
        if mine is None:
            row.update(ours=None, outcome="not extracted yet", where="")
        elif mine["status"] != "ok":
            row.update(ours=len(mine["f2p"]), outcome=mine["status"], where=mine["from"])
        else:
            same = mine["f2p"] == pub_tests if pub else len(mine["f2p"]) == rep["f2p"]
            extra = sorted(set(mine["f2p"]) - set(pub_tests)) if pub else []
            missing = sorted(set(pub_tests) - set(mine["f2p"])) if pub else []
            row.update(
                ours=len(mine["f2p"]),
                outcome="identical" if same else "differs",
                where=mine["from"],
                only_ours=extra,
                only_published=missing,
            )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", type=Path, action="append", default=[])
    ap.add_argument("--published", type=Path, action="append", default=[])
    ap.add_argument("--season", action="append", default=[])
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    published = {r["instance_id"]: r for p in args.published for r in _lines(p)}
    ours: dict[int, dict] = {}
    for season in args.season:
        ours.update(ours_from_season(season))
    older = {i.instance_id: dict(i.record) for i in corpus.load_corpus(args.corpus)} if args.corpus else {}
    rows = compare([r for p in args.report for r in _lines(p)], published, ours, older)
    print("| PR | published F2P | ours | compared by | outcome | from |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| #{r['pr']} | {r['published']} | {r['ours']} | {r['by']} | {r['outcome']} | {r['where']} |")
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["outcome"]] = totals.get(r["outcome"], 0) + 1
    print("\n" + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())) + f" (of {len(rows)})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
