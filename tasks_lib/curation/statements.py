"""Curated problem statements: `data/statements/<source>.jsonl`, written by the curators where the upstream text
leaks the answer or specifies too little (SWE-bench Verified re-annotated its statements for the same reason).

One JSON object per line:

    {"instance_id": "...", "statement": "...",
     "provenance": {"written_by": "...", "written_on": "YYYY-MM-DD", "from": "...", "reviewed_by": "..."}}

A statement says what a user or an API client sees and what they expect, in the curators' own words: never the
implementation, never a test name or a test file. Packaging prefers it to the upstream text and passes it
through the same leak gate (a curated statement that leaks is rejected like any other); the instance's notes
say "curated" and where from.

A record may instead leave the PR out: `"unspecifiable": "<why>"` in place of `"statement"` (same provenance),
where the curators read the PR's tests and found no task a statement could specify without handing over the
answer: tests that check private internals, tests that never import the change, a release merge with no single
task, tests that all skip without an API key. The filter then refuses the PR (`unspecifiable`, counted in the
funnel with every other reason) before its extraction costs a container; the reason stays in this file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError

PROVENANCE_KEYS = ("written_by", "written_on", "from", "reviewed_by")


@dataclass(frozen=True)
class Curated:
    instance_id: str
    statement: str
    provenance: dict[str, str]

    def note(self, source_name: str) -> str:
        p = self.provenance
        return (
            f"problem_statement curated (data/statements/{source_name}.jsonl: written by {p['written_by']} on "
            f"{p['written_on']} from {p['from']}; reviewed by {p['reviewed_by']})."
        )


def statements_file(source_name: str) -> Path:
    return paths.data_dir() / "statements" / f"{source_name}.jsonl"


def load(path: Path) -> dict[str, Curated]:
    """The curated statements of one file, by instance id. InputError naming the file and line when a record is
    malformed, lacks provenance, or repeats an instance."""
    return {k: v for k, v in _records(path).items() if isinstance(v, Curated)}


def unspecifiable(path: Path) -> dict[str, str]:
    """The instances the file leaves out, by instance id, with the curators' reason (same checks as `load`)."""
    return {k: v for k, v in _records(path).items() if isinstance(v, str)}


def _records(path: Path) -> dict[str, Curated | str]:
    out: dict[str, Curated | str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return out
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read curated statements ({exc})") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not a JSON object ({exc.msg})") from None
        if not isinstance(row, dict):
            raise InputError(f"{where}: not a JSON object")
        iid, text, prov = row.get("instance_id"), row.get("statement"), row.get("provenance")
        why = row.get("unspecifiable")
        if not isinstance(iid, str) or not iid:
            raise InputError(f"{where}: 'instance_id' must be a non-empty string")
        if (text is None) == (why is None):
            raise InputError(
                f"{where}: {iid} needs either 'statement' or 'unspecifiable' (the reason), not both"
            )
        if why is not None and (not isinstance(why, str) or not why.strip()):
            raise InputError(f"{where}: 'unspecifiable' of {iid} must be a non-empty string (the reason)")
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise InputError(f"{where}: 'statement' of {iid} must be a non-empty string")
        if not isinstance(prov, dict) or any(
            not isinstance(prov.get(k), str) or not prov[k] for k in PROVENANCE_KEYS
        ):
            raise InputError(f"{where}: 'provenance' of {iid} needs {', '.join(PROVENANCE_KEYS)} (strings)")
        if iid in out:
            raise InputError(f"{where}: a second record for {iid}")
        provenance = {k: prov[k] for k in PROVENANCE_KEYS}
        out[iid] = why.strip() if why is not None else Curated(iid, text.strip(), provenance)
    return out


def for_source(source_name: str) -> dict[str, Curated]:
    return load(statements_file(source_name))


def unspecifiable_for(source_name: str) -> dict[str, str]:
    return unspecifiable(statements_file(source_name))
