"""Check curated statements against the leak gate before they are committed.

    python scripts/statement_check.py --dataset v0.2 data/statements/mcp-context-forge.jsonl [more.jsonl ...]

For each statement of the files (the `data/statements/<source>.jsonl` format, tasks_lib/curation/statements.py), the
verdict of the gate packaging applies (`packaging.apply_leak_gate`, tasks_lib/curation/statement_gate.py: a hidden
test named, a test file named, a line of either patch quoted, a diff; too few words; a name the reference patch
adds and the hidden tests use left unnamed) against its instance in the corpus, and its word count. Exit 1 when one leaks, is too short or
names an instance the corpus does not hold; 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks_lib.core.errors import InputError  # noqa: E402
from tasks_lib.curation import packaging, statement_gate, statements  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="corpus folder name (data/corpus/NAME) or a JSONL path")
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args(argv)
    path = Path(args.dataset)
    if not path.is_file():
        path = Path(__file__).resolve().parents[1] / "data" / "corpus" / args.dataset / "instances.jsonl"
    try:
        records = {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines()) if r}
        curated = {k: v for f in args.files for k, v in statements.load(f).items()}
    except (OSError, InputError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bad = 0
    for iid, c in curated.items():
        record = records.get(iid)
        if record is None:
            print(f"{iid}: not in {path}")
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
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
