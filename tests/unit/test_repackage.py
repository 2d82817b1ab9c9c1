"""Re-packaging committed instances under today's statement rules, never extracting them again
(tasks_lib/curation/repackage.py, `pbench corpus NAME --reuse OLD`)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.curation import packaging, repackage
from tasks_lib.curation import release as corpus_release
from tasks_lib.sources.crawl.base import ClosingIssue, PullRequest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
DATA = Path(__file__).resolve().parents[2] / "data"
# What extraction decided: re-packaging never changes it.
EXTRACTED = (
    "fail_to_pass", "pass_to_pass", "patch", "test_patch", "test_patch_backend", "test_patch_frontend",
    "base_commit", "head_commit", "environment", "created_at", "contamination_tier",
)  # fmt: skip
BODY = "Reading a user that does not exist answers 500 instead of a 404 with a clear message for API clients."


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    shutil.copy(DATA / "statement_rules.toml", tmp_path / "data")
    return tmp_path / "data"


def _record(**over) -> dict:
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    return {**record, "problem_statement": BODY, **over}


def _pr(record: dict, **over) -> PullRequest:
    values = dict(
        source="fastapi-template",
        repo=record["repo"],
        number=record["pr_number"],
        title=record["pr_title"],
        body=BODY,
        author="a",
        author_login_raw="a",
        author_is_bot=False,
        labels=(),
        files=(),
        additions=1,
        deletions=1,
        changed_files=1,
        merge_commit=record["head_commit"],
        base_commit=record["base_commit"],
        head_commit=record["head_commit"],
        base_ref="master",
        head_ref="x",
        default_branch="master",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        merged_at=datetime(2026, 1, 22, tzinfo=UTC),
        url=record["pr_url"],
    )
    return PullRequest(**{**values, **over})


def test_the_extraction_stays_and_the_notes_it_wrote_are_kept(data_dir):
    flaky = "2 flaky test(s) excluded: tests/a.py::t1, tests/a.py::t2"
    record = _record(notes=f"{packaging.PR_BODY_NOTE} {flaky} {packaging.FALLBACK_NOTE}")
    done = repackage.repackage(record, "fastapi-template")
    assert done.record is not None and not done.reasons and not done.from_pr_record
    assert {k: done.record[k] for k in EXTRACTED} == {k: record[k] for k in EXTRACTED}
    assert done.record["notes"] == f"{packaging.PR_BODY_NOTE} {flaky} {packaging.FALLBACK_NOTE}"
    assert done.statement_source == "pr_description"
    # idempotent: re-packaging what re-packaging wrote changes nothing
    assert repackage.repackage(done.record, "fastapi-template").record == done.record


def test_the_pr_record_decides_the_source_and_the_note_tells_the_truth(data_dir):
    record = _record(notes=packaging.PR_BODY_NOTE)  # v0.2's note: "no linked issue"
    numbers_only = _pr(record, closing_issues=(ClosingIssue(3411),))
    done = repackage.repackage(record, "fastapi-template", numbers_only)
    assert done.record["notes"].startswith(packaging.PR_BODY_ISSUES_NOTE.format(issues="#3411"))
    assert "no linked issue" not in done.record["notes"] and done.from_pr_record
    issue = ClosingIssue(3411, "User lookup crashes", "GET /users/{id} of a missing user answers 500 today.")
    with_text = _pr(record, closing_issues=(issue,), hints_text="seen on staging too")
    done = repackage.repackage(record, "fastapi-template", with_text)
    assert done.record["problem_statement"] == f"{issue.title}\n{issue.body}"
    assert done.record["hints_text"] == "seen on staging too" and done.statement_source == "issue"


def test_a_curated_statement_is_preferred_and_the_upstream_source_kept(data_dir):
    record = _record(notes=packaging.PR_BODY_NOTE)
    text = (
        "Asking the API for a user id that no account has should answer 404 with the detail "
        "'The user with this id does not exist in the system' rather than failing."
    )
    (data_dir / "statements").mkdir()
    prov = {"written_by": "c", "written_on": "2026-12-03", "from": "the PR's behaviour", "reviewed_by": "r"}
    line = {"instance_id": record["instance_id"], "statement": text, "provenance": prov}
    (data_dir / "statements" / "fastapi-template.jsonl").write_text(json.dumps(line) + "\n")
    done = repackage.repackage(record, "fastapi-template")
    assert done.record["problem_statement"] == text and done.statement_source == "curated"
    assert done.record["notes"].endswith(f"Upstream: {packaging.PR_BODY_NOTE}")
    assert repackage.repackage(done.record, "fastapi-template").record == done.record


def test_a_statement_that_leaks_or_says_too_little_is_left_out_with_the_reason(data_dir):
    hidden = _record()["fail_to_pass"]["backend"][0].rsplit("::", 1)[1]
    leaky = repackage.repackage(_record(problem_statement=f"Make {hidden} pass, please."), "fastapi-template")
    assert leaky.record is None and leaky.reasons[0].startswith("statement_leaks:")
    assert hidden in leaky.reasons[0]
    terse = repackage.repackage(_record(problem_statement="🐛 Fix user lookup"), "fastapi-template")
    assert terse.record is None and terse.reasons[0].startswith("statement_underspecified: 3 words")
    assert terse.row()["gate"].startswith("rejected: statement_underspecified")


def test_a_corpus_reuses_another_without_extracting_and_says_what_it_left_out(data_dir, monkeypatch):
    good = _record(notes=packaging.PR_BODY_NOTE)
    terse = {**_record(problem_statement="Fix it"), "instance_id": good["instance_id"][:-4] + "9999"}
    old = data_dir / "corpus" / "v1"
    old.mkdir(parents=True)
    (old / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (good, terse)))
    fresher = {**good, "problem_statement": BODY + " Also for admins."}
    monkeypatch.setattr(corpus_release, "_season_instances", lambda name: [fresher])
    refused = {"instance_id": "acme__shop-7", "reasons": ["statement_leaks: file: tests/test_a.py"]}
    monkeypatch.setattr(corpus_release, "_season_rejected", lambda name: [refused])
    out = corpus_release.build("v2", ["s"], ["v1"])
    rows = [json.loads(x) for x in (out / "instances.jsonl").read_text().splitlines()]
    assert [r["problem_statement"] for r in rows] == [
        fresher["problem_statement"]
    ]  # the season's record wins
    rejected = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert [r["instance_id"] for r in rejected] == sorted([terse["instance_id"], "acme__shop-7"])
    table = [json.loads(x) for x in (out / "statements.jsonl").read_text().splitlines()]
    assert {r["instance_id"]: r["gate"][:8] for r in table} == {
        good["instance_id"]: "kept",
        terse["instance_id"]: "rejected",
    }
    card = (out / "README.md").read_text()
    assert "| the PR description | 1 |" in card and "1 statement_underspecified" in card
    assert "1 statement_leaks" in card  # what a season's packaging refused counts too
    assert "Re-packaged without extracting again" in card
    # A corpus re-packages itself: its instances again, and what it left out stays left out with its reasons
    # (no record to package again), unless an input brings the instance.
    again = corpus_release.build("v2", [], ["v2"])
    assert [json.loads(x)["instance_id"] for x in (again / "instances.jsonl").read_text().splitlines()] == [
        good["instance_id"]
    ]
    kept_out = [json.loads(x) for x in (again / "rejected.jsonl").read_text().splitlines()]
    assert {r["instance_id"]: r["reasons"] for r in kept_out} == {
        "acme__shop-7": refused["reasons"],
        terse["instance_id"]: ["statement_underspecified: 2 words (fewer than 10)"],
    }
    assert "`v2` (its own previous version, in git)" in (again / "README.md").read_text()
    with pytest.raises(InputError, match=r"--reuse v7: .*missing \(known: v1, v2\)"):
        corpus_release.build("v3", [], ["v7"])


def test_the_statement_source_is_read_from_the_note():
    assert repackage.statement_source(f"{packaging.ISSUE_NOTE} (#1).") == "issue"
    assert repackage.statement_source(packaging.TITLE_NOTE) == "pr_title"
    note = f"{packaging.PR_BODY_NOTE} Leak gate: sections dropped (Testing)."
    assert repackage.statement_source(note) == "pr_description_sections_dropped"
    assert repackage.statement_source("problem_statement curated (x). Upstream: y") == "curated"
    assert dataclasses.is_dataclass(repackage.Repackaged)
