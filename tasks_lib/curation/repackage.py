"""Re-packaging a committed instance without extracting it again: the statement rules change, the extraction
does not.

An instance record holds everything its extraction decided (FAIL_TO_PASS, PASS_TO_PASS, the patches, the
commits, the environment). What packaging decides on top of it — the problem statement, the hints, the note
that says where the statement comes from, the leak gate's verdict — is computed again from the PR record
(`packaging.problem_statement`, the curated statements of `data/statements/`) and the same gate. No container,
no repository, no network: `pbench corpus NAME --reuse OLD` re-packages a whole corpus in seconds.

The PR records come from the crawl of a season of the instance's repository on this machine
(`data/seasons/*/…/prs.parquet`; `pbench curate --season S --until crawl` makes one offline). Without one,
the record's own statement stands for the upstream text and its note is kept: the build says which.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from tasks_lib.core import paths
from tasks_lib.corpus import schema
from tasks_lib.corpus.load import source_or_none
from tasks_lib.curation import packaging, statements
from tasks_lib.sources.crawl.base import PullRequest, read_prs_parquet

# The parts of an instance's notes that its extraction decided (kept as they are); everything else in the
# notes is packaging's and is written again.
_EXTRACTION_NOTES = (
    re.compile(r"\d+ flaky test\(s\) excluded: .*?(?= base collection failed:|$)"),
    re.compile(re.escape(packaging.FALLBACK_NOTE)),
)


@dataclass(frozen=True)
class Repackaged:
    instance_id: str
    record: dict | None  # the instance, or None when the gate rejects it
    reasons: tuple[str, ...]  # why it was rejected
    statement_source: str  # issue, pr_description, pr_description_sections_dropped, curated, pr_title
    from_pr_record: bool  # the statement rebuilt from the crawl's PR record (else the record's own text)

    def row(self) -> dict:
        text = (self.record or {}).get("problem_statement", "")
        return {
            "instance_id": self.instance_id,
            "statement_source": self.statement_source,
            "words": len(text.split()),
            "chars": len(text),
            "gate": "rejected: " + "; ".join(self.reasons) if self.reasons else "kept",
            "from_pr_record": self.from_pr_record,
        }


def statement_source(notes: str) -> str:
    """Where an instance's statement comes from, read from the note packaging wrote."""
    if notes.startswith(packaging.CURATED_PREFIX):
        return "curated"
    if notes.startswith(packaging.ISSUE_NOTE):
        return "issue"
    if notes.startswith(packaging.TITLE_PREFIX):
        return "pr_title"
    if "Leak gate: sections dropped" in notes:
        return "pr_description_sections_dropped"
    return "pr_description"


def extraction_notes(notes: str) -> list[str]:
    """The notes an instance's extraction wrote (flaky tests excluded, the fallback), in their order."""
    found = [(m.start(), m.group(0).strip()) for rx in _EXTRACTION_NOTES for m in rx.finditer(notes or "")]
    return [text for _, text in sorted(found)]


def _upstream(record: dict, pr: PullRequest | None) -> tuple[str, str, str]:
    """(statement, note, hints) of the upstream text: from the PR record where there is one, else the record's
    own statement with the note it has (without what packaging added later)."""
    if pr is not None:
        statement, note = packaging.problem_statement(pr)
        return statement, note, pr.hints_text
    notes = record.get("notes") or ""
    note = notes.split(" Upstream: ", 1)[1] if notes.startswith(packaging.CURATED_PREFIX) else notes
    for text in extraction_notes(note):
        note = note.replace(text, "")
    note = re.sub(r"\s*Leak gate: (sections|hints_text) dropped \(.*?\)\.(?=\s|$)", "", note).strip()
    return record.get("problem_statement") or "", note, record.get("hints_text") or ""


def repackage(record: dict, source_name: str, pr: PullRequest | None = None) -> Repackaged:
    """The instance with its statement, hints and notes packaged again under today's rules; rejected (record
    None, the reasons given) when the leak gate or the schema refuses it."""
    instance = dict(record)
    statement, note, hints = _upstream(record, pr)
    curated = statements.for_source(source_name).get(record["instance_id"])
    if curated is not None:
        statement, note = curated.statement, f"{curated.note(source_name)} Upstream: {note}"
    instance["problem_statement"] = statement
    instance["hints_text"] = hints
    instance["notes"] = " ".join([note, *extraction_notes(record.get("notes") or "")]).strip()
    reasons = packaging.apply_leak_gate(instance)
    if not reasons:
        reasons = [f"schema: {e}" for e in schema.validate_instance(instance, source_or_none(instance))]
    return Repackaged(
        record["instance_id"],
        None if reasons else instance,
        tuple(reasons),
        statement_source(instance["notes"]),
        pr is not None,
    )


def crawled_prs(repo: str) -> dict[int, PullRequest]:
    """The PR records of `repo` in the crawls of this machine's seasons, by number (the newest crawl wins)."""
    found: dict[int, PullRequest] = {}
    tables = sorted(paths.seasons_dir().glob("**/prs.parquet"), key=lambda p: p.stat().st_mtime)
    for table in tables:
        for pr in read_prs_parquet(table):
            if pr.repo == repo:
                found[pr.number] = pr
    return found


def counts(results: list[Repackaged]) -> Counter:
    return Counter(r.statement_source for r in results if r.record is not None)


def prs_for(records: list[dict]) -> dict[str, dict[int, PullRequest]]:
    return {repo: crawled_prs(repo) for repo in sorted({r["repo"] for r in records})}
