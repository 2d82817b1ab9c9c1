"""Check curated statements against the leak gate before they are committed.

    python scripts/statement_check.py --dataset v0.2 data/statements/mcp-context-forge.jsonl [more.jsonl ...]
    python scripts/statement_check.py --season langflow [--mirror PATH] data/statements/langflow.jsonl

For each statement of the files (the `data/statements/<source>.jsonl` format, tasks_lib/curation/statements.py), the
verdict of the gate packaging applies (`packaging.apply_leak_gate`, tasks_lib/curation/statement_gate.py: a hidden
test named, a test file named, a line of either patch quoted, a diff; too few words; a name the reference patch
adds and the hidden tests use left unnamed) against its instance, and its word count. The instance comes from a
corpus (`--dataset`), or, for PRs a season has extracted but not yet packaged, from the season's crawl and
extractions (`--season`, tasks_lib/curation/extracted.py: the record packaging would build, read-only; the season
folder is under PBENCH_OUTPUT_DIR, `data/` by default, and `--mirror` gives the source's repository as to
`pbench curate`). Exit 1 when one leaks, is too short or names an instance the corpus does not hold; 2 on
unreadable input, an unknown season, or a statement whose PR the season has not extracted (or not ok).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks_lib.core.errors import PbenchError  # noqa: E402
from tasks_lib.curation import extracted, packaging, statement_gate, statements  # noqa: E402
from tasks_lib.sources import repos  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    against = ap.add_mutually_exclusive_group(required=True)
    against.add_argument("--dataset", help="corpus folder name (data/corpus/NAME) or a JSONL path")
    against.add_argument("--season", help="a season's extracted PRs, not yet packaged (data/seasons/NAME)")
    ap.add_argument(
        "--mirror",
        action="append",
        default=[],
        help="with --season: the source's repository (PATH or SOURCE=PATH)",
    )
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    if args.mirror and not args.season:
        ap.error("--mirror goes with --season (a corpus's records hold their patches)")
    try:
        curated = {k: v for f in args.files for k, v in statements.load(f).items()}
        if args.season:
            where = f"season {args.season}"
            records = extracted.records(args.season, curated, repos.parse_mirrors(args.mirror))
        else:
            path = Path(args.dataset)
            if not path.is_file():
                path = (
                    Path(__file__).resolve().parents[1] / "data" / "corpus" / args.dataset / "instances.jsonl"
                )
            where = str(path)
            records = {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}
    except (OSError, PbenchError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if check(curated, records, where) else 0


def check(curated: dict[str, statements.Curated], records: dict[str, dict], where: str) -> int:
    """Print each statement's verdict; how many were refused (or had no instance)."""
    bad = 0
    for iid, c in curated.items():
        record = records.get(iid)
        if record is None:
            print(f"{iid}: not in {where}")
            bad += 1
            continue
        # The gate packaging applies, on the record with this curated statement and a curated note.
        inst = {**record, "problem_statement": c.statement, "notes": c.note("curated")}
        reasons = packaging.apply_leak_gate(inst)
        if not reasons and inst["problem_statement"] != c.statement:
            reasons = ["the gate would change it (sections dropped): write it without them"]
        bad += bool(reasons)
        words = statement_gate.words(c.statement)
        print(
            f"{iid}: {'REFUSED' if reasons else 'ok'} ({words} words){': ' + '; '.join(reasons) if reasons else ''}"
        )
    return bad


if __name__ == "__main__":
    sys.exit(main())
