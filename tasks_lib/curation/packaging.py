"""Stage 5 of curation: a `Candidate` (one merged PR, worked out once) + its extraction + its tier -> one task
instance (`package`: the record built, the leak gate and the schema check applied, a `TaskInstance`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core.constants import SCHEMA_VERSION, Tier
from tasks_lib.corpus import schema
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.curation import interface, statement_gate, statements
from tasks_lib.curation.extraction import ExtractionResult
from tasks_lib.formats import patches
from tasks_lib.images import build as images
from tasks_lib.sources import gitops
from tasks_lib.sources.crawl.base import PullRequest
from tasks_lib.sources.record import SourceRecord

ISSUE_NOTE = "problem_statement sourced from the closing issue(s), title and body"
TITLE_PREFIX = "problem_statement sourced from the PR title"
TITLE_NOTE = (
    f"{TITLE_PREFIX} (no PR description beyond the title, no closing issue body) — terse; review"
    " that the hidden tests follow from it."
)
PR_BODY_PREFIX = "problem_statement sourced from PR description"
CURATED_PREFIX = "problem_statement curated"
PR_BODY_NOTE = f"{PR_BODY_PREFIX} (no linked issue) — review for solution leakage."
# The PR closes issues, but where it was read from (an export of numbers only) their text is not: say so.
PR_BODY_ISSUES_NOTE = (
    PR_BODY_PREFIX + ": the PR closes {issues}, whose text is not in the source it was read from — review for"
    " solution leakage."
)
# An extraction whose base side did not collect (tasks_lib/curation/extraction.py's fallback).
FALLBACK_NOTE = "base collection failed: FAIL_TO_PASS from tests the test patch adds (fallback)"


def issues_text(issues) -> str:
    """SWE-bench's form of a statement from issues: each issue's title, a newline, its body; several in the
    order the PR names them, separated by a blank line."""
    parts = []
    for issue in issues:
        title, body = (issue.title or "").strip(), (issue.body or "").strip()
        parts.append(f"{title}\n{body}" if title else body)
    return "\n\n".join(parts)


def _file_sha(repo: Path, commit: str, candidates: tuple[str, ...]) -> str:
    for rel in candidates:
        data = gitops.read_file(repo, commit, rel)
        if data is not None:
            return "sha256:" + hashlib.sha256(data).hexdigest()
    return ""


def environment(source: SourceRecord, repo: Path, base: str) -> dict:
    """What an agent may know of the environment: versions and lock hashes at the base commit."""
    backend_pre = source.backend.prefix
    frontend_pre = source.frontend.prefix if source.frontend else "frontend/"
    backend_locks = {rel: gitops.read_file(repo, base, rel) for rel in source.backend.lock_files}
    env = {
        "python_version": source.backend.python_version,
        "node_version": source.frontend.node_version if source.frontend else "",
        "uv_lock_sha": _file_sha(repo, base, ("uv.lock", f"{backend_pre}uv.lock")),
        "bun_lock_sha": _file_sha(
            repo, base, (f"{frontend_pre}bun.lock", f"{frontend_pre}bun.lockb", "bun.lock")
        ),
        "docker_compose_sha": _file_sha(repo, base, ("docker-compose.yml", "compose.yml", "compose.yaml")),
    }
    if any(v is not None for v in backend_locks.values()):
        env["backend_lock_sha"] = images.lock_sha(backend_locks)
    if source.frontend:
        fl = {rel: gitops.read_file(repo, base, rel) for rel in source.frontend.lock_files}
        if any(v is not None for v in fl.values()):
            env["frontend_lock_sha"] = images.lock_sha(fl)
    return env


def difficulty(patch_text: str) -> str:
    """A coarse, documented proxy: changed non-test lines of the reference patch (hunk bodies only)."""
    changed = 0
    in_hunk = False
    for line in patch_text.splitlines():
        if line.startswith("diff --git "):
            in_hunk = False
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line[:1] in ("+", "-"):
            changed += 1
    if changed <= 10:
        return "easy"
    if changed <= 80:
        return "medium"
    return "hard"


def problem_statement(pr: PullRequest) -> tuple[str, str]:
    """The closing issues (title and body, `issues_text`) that have a body; else the PR body, the note naming
    the closing issues whose text is missing where there are some; else (no body anywhere, or a body that only
    repeats the title) the titles: the
    PR's, then its closing issues', one per line, with a note saying how little the agent is told. Empty only
    when even the titles are (then schema validation rejects the instance)."""
    with_body = [i for i in pr.closing_issues if i.body and i.body.strip()]
    if with_body:
        return issues_text(with_body), f"{ISSUE_NOTE} ({', '.join(f'#{i.number}' for i in with_body)})."
    if pr.body and pr.body.strip() and not statement_gate.same_words(pr.body, pr.title):
        if pr.closing_issues:
            numbers = ", ".join(f"#{i.number}" for i in pr.closing_issues)
            return pr.body, PR_BODY_ISSUES_NOTE.format(issues=numbers)
        return pr.body, PR_BODY_NOTE
    titles = [t.strip() for t in (pr.title, *(i.title for i in pr.closing_issues)) if t and t.strip()]
    if titles:
        return "\n".join(dict.fromkeys(titles)), TITLE_NOTE
    return "", PR_BODY_NOTE


def apply_leak_gate(instance: dict) -> list[str]:
    """The leak gate on a packaged instance (tasks_lib/curation/statement_gate.py, data/statement_rules.toml). An
    upstream statement is first made what it renders as (`tidy`: a PR template's HTML comments go). A PR
    description loses its testing / implementation sections (what the PR did is the answer; with
    `sections.drop = "on_leak"`, only when it leaks), and any statement that leaks does too. If it still leaks,
    or too little is left, or it is a PR title alone, or it never names what the hidden tests use that the
    reference patch adds, the reasons (the instance is rejected with them). A statement kept with sections
    dropped says so in the notes. Hints (the issues' comments, shown with `pbench show --with-hints`) that leak
    are dropped, and the notes say what leaked."""
    r = statement_gate.rules()
    notes = instance.get("notes") or ""
    statement = instance.get("problem_statement") or ""
    if not notes.startswith(CURATED_PREFIX):
        statement = statement_gate.tidy(statement)
    verdict = statement_gate.check(statement, instance)
    description = notes.startswith(PR_BODY_PREFIX)
    if verdict.leaks or (description and r.drop_sections == "always"):
        cleaned, dropped = statement_gate.clean(statement, instance=instance)
        if dropped:
            statement, verdict = cleaned, statement_gate.check(cleaned, instance)
            notes = " ".join([notes, f"Leak gate: sections dropped ({', '.join(dropped)})."]).strip()
    if verdict.leaks:
        return [f"statement_leaks: {verdict.reason()}"]
    hints = statement_gate.tidy(instance.get("hints_text") or "")
    leaky_hints = statement_gate.check(hints, instance) if hints else None
    if leaky_hints is not None and leaky_hints.leaks:  # `pbench show --with-hints` shows them to the agent
        hints = ""
        notes = " ".join([notes, f"Leak gate: hints_text dropped ({leaky_hints.reason()})."])
    instance["problem_statement"], instance["notes"] = statement, notes
    if "hints_text" in instance:
        instance["hints_text"] = hints
    if r.title_alone and notes.startswith(TITLE_PREFIX):
        return [f"statement_underspecified: the PR title alone ({statement_gate.words(statement)} words)"]
    if statement_gate.underspecified(statement):
        return [
            f"statement_underspecified: {statement_gate.words(statement)} words (fewer than {r.min_words})"
        ]
    unstated = interface.unstated_names(statement, instance) if r.interface == "reject" else []
    if unstated:
        return [
            "statement_underspecified: the hidden tests use names the reference patch adds and the statement"
            f" never gives ({', '.join(unstated[:6])}{', …' if len(unstated) > 6 else ''})"
        ]
    return []


@dataclass(frozen=True)
class Candidate:
    """A merged PR on its way to an instance, its facts worked out once: the record of its era (lock files,
    dirs, patterns), its instance id, the commits its extraction ran, its diff split into code and tests (per
    side) and the stack domain the split's files say."""

    pr: PullRequest
    source: SourceRecord  # the record of the PR's era
    repo: Path  # the source's clone, where its commits are
    instance_id: str
    base_commit: str
    head_commit: str
    split: patches.PatchSplit
    stack_domain: str

    @classmethod
    def of(cls, pr: PullRequest, source: SourceRecord, repo: Path, extraction: ExtractionResult) -> Candidate:
        era_source = source.for_era(source.era_for(pr.merged_at))
        base, head = extraction.base_commit, extraction.head_commit
        split = patches.split_patch(gitops.diff(repo, base, head), era_source)
        domain = era_source.stack_domain(patches.changed_paths(split.patch)) or era_source.stack_domain(
            patches.changed_paths(split.test_patch)
        )
        owner, name = era_source.owner_name
        iid = f"{owner}__{name}-{pr.number}"
        return cls(pr, era_source, repo, iid, base, head, split, str(domain) if domain else "backend_only")


def package(
    candidate: Candidate, extraction: ExtractionResult, tier: Tier, commit_exists: Callable[[str], bool]
) -> tuple[TaskInstance | None, list[str]]:
    """(the instance, []) or (None, why it is refused): the record built, then the leak gate (which may
    drop a description's sections) and the schema check, `commit_exists` answering for its commits."""
    record = build_instance(candidate, extraction, tier)
    problems = apply_leak_gate(record)
    problems += schema.validate_instance(record, candidate.source, commit_exists=commit_exists)
    return (None, problems) if problems else (TaskInstance.of(record), [])


def build_instance(candidate: Candidate, extraction: ExtractionResult, tier: Tier) -> dict:
    """The instance's record (schema 0.1), before the leak gate and the schema check."""
    pr, source, repo, split = candidate.pr, candidate.source, candidate.repo, candidate.split
    base, head = candidate.base_commit, candidate.head_commit
    statement, note = problem_statement(pr)
    curated = statements.for_source(source.name).get(candidate.instance_id)
    if curated is not None:  # the curators' statement, preferred to the upstream text (which the note keeps)
        statement, note = curated.statement, f"{curated.note(source.name)} Upstream: {note}"
    notes = [note]
    if extraction.flaky_tests:
        notes.append(
            f"{len(extraction.flaky_tests)} flaky test(s) excluded: {', '.join(extraction.flaky_tests)}"
        )
    if extraction.fallback_used:
        notes.append(FALLBACK_NOTE)
    return {
        "schema_version": SCHEMA_VERSION,
        "instance_id": candidate.instance_id,
        "repo": source.repo,
        "pr_number": pr.number,
        "pr_url": pr.url,
        "pr_title": pr.title,
        "pr_author": pr.author_login_raw or pr.author,
        "pr_labels": list(pr.labels),
        "base_commit": base,
        "head_commit": head,
        "problem_statement": statement,
        "hints_text": pr.hints_text,
        "patch": split.patch,
        "test_patch": split.test_patch,
        "test_patch_backend": split.test_patch_backend,
        "test_patch_frontend": split.test_patch_frontend,
        "fail_to_pass": {
            "backend": list(extraction.backend_fail_to_pass),
            "frontend": list(extraction.frontend_fail_to_pass),
        },
        "pass_to_pass": {
            "backend": list(extraction.backend_pass_to_pass),
            "frontend": list(extraction.frontend_pass_to_pass),
        },
        "stack_domain": candidate.stack_domain,
        "environment": environment(source, repo, base),
        "created_at": pr.merged_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "contamination_tier": str(tier),
        "difficulty": difficulty(split.patch),
        "notes": " ".join(notes),
    }
