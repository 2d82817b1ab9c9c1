"""Crawl from a `gh pr list --json` export: normalisation, skipping, and errors that name file, line, field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.sources.crawl.base import (
    PRS_SCHEMA,
    ChangedFile,
    PullRequest,
    read_prs_parquet,
    write_prs_parquet,
)
from tasks_lib.sources.crawl.export import ExportPRSource

REAL_EXPORT = Path(__file__).resolve().parents[3] / "shared/reference/fastapi-template/prs.jsonl"
SHA = "4cab9e972f5e3e32c518ec2c6e09e18455fe469a"


def gh_row(number: int = 1396, **over) -> dict:
    """A row shaped like `gh pr list --json …` output (trimmed from the real template export)."""
    row = {
        "additions": 35,
        "author": {"id": "MDQ6VXNlcjE2MjQ2MzM4", "is_bot": False, "login": "saltie2193", "name": "Saltie"},
        "baseRefName": "master",
        "body": "Fix an issue where `read_user_by_id` would fail.",
        "changedFiles": 2,
        "closingIssuesReferences": [],
        "createdAt": "2024-10-12T18:42:16Z",
        "deletions": 3,
        "files": [
            {"additions": 2, "deletions": 0, "path": "backend/app/api/routes/users.py"},
            {"additions": 33, "deletions": 3, "path": "backend/tests/api/routes/test_users.py"},
        ],
        "headRefName": "backend-read-user-by-id-no-user",
        "labels": [
            {"color": "d73a4a", "description": "Something isn't working", "id": "MDU6", "name": "bug"}
        ],
        "mergeCommit": {"oid": SHA},
        "mergedAt": "2026-01-22T12:37:57Z",
        "number": number,
        "repo": "fastapi/full-stack-fastapi-template",
        "reviewDecision": "",
        "state": "MERGED",
        "title": "🐛 Handle non-existing user IDs in `read_user_by_id`",
        "url": f"https://github.com/fastapi/full-stack-fastapi-template/pull/{number}",
    }
    row.update(over)
    return row


def write_jsonl(tmp_path: Path, rows: list, name: str = "prs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def crawl(path: Path, since=None, until=None) -> tuple[list[PullRequest], ExportPRSource]:
    source = ExportPRSource(path, "fastapi-template", "master")
    return list(source.iter_merged_prs(since, until)), source


def test_row_is_normalized(tmp_path):
    """Every column of the normalized record is filled from the gh shape; head = merge commit, base unknown."""
    (pr,), _ = crawl(write_jsonl(tmp_path, [gh_row()]))
    assert pr.repo == "fastapi/full-stack-fastapi-template" and pr.number == 1396
    assert pr.author == pr.author_login_raw == "saltie2193" and not pr.author_is_bot
    assert pr.labels == ("bug",)
    assert pr.files == (
        ChangedFile("backend/app/api/routes/users.py", 2, 0),
        ChangedFile("backend/tests/api/routes/test_users.py", 33, 3),
    )
    assert (pr.additions, pr.deletions, pr.changed_files) == (35, 3, 2)
    assert pr.merge_commit == pr.head_commit == SHA and pr.base_commit is None
    assert (pr.base_ref, pr.head_ref, pr.default_branch) == (
        "master",
        "backend-read-user-by-id-no-user",
        "master",
    )
    assert pr.merged_at == datetime(2026, 1, 22, 12, 37, 57, tzinfo=UTC)
    assert pr.created_at == datetime(2024, 10, 12, 18, 42, 16, tzinfo=UTC)
    assert pr.crawled_from == "export" and pr.source == "fastapi-template"
    assert pr.closing_issues == () and pr.hints_text == ""


def test_an_export_rebuilt_from_git_history_has_no_branch_names(tmp_path):
    """Rule: `headRefName` null (an export rebuilt from the git history, ../shared/reference/langflow) is no branch
    name, not an error; `baseRefName` still decides the default branch, a file's null counts are 0, and a null
    `createdAt` is the merge time."""
    row = gh_row(headRefName=None, reviewDecision=None, body=None, createdAt=None)
    row["files"][0] = {"additions": None, "deletions": None, "path": "backend/app/api/routes/users.py"}
    (pr,), _ = crawl(write_jsonl(tmp_path, [row]))
    assert (pr.head_ref, pr.base_ref, pr.body) == ("", "master", "")
    assert pr.files[0] == ChangedFile("backend/app/api/routes/users.py", 0, 0)
    assert pr.created_at == pr.merged_at  # createdAt unknown: the merge time


def test_app_logins_normalize_to_bot_logins(tmp_path):
    """gh's `app/dependabot` and the API's `dependabot[bot]` are one author; the raw login is kept."""
    rows = [
        gh_row(1, author={"is_bot": True, "login": "app/dependabot"}),
        gh_row(2, author={"login": "dependabot[bot]"}),  # no is_bot flag: the login says it
        gh_row(3, author=None),  # deleted account
    ]
    prs, _ = crawl(write_jsonl(tmp_path, rows))
    assert [(p.author, p.author_login_raw, p.author_is_bot) for p in prs] == [
        ("dependabot[bot]", "app/dependabot", True),
        ("dependabot[bot]", "dependabot[bot]", True),
        ("ghost", "ghost", False),
    ]


def test_unmerged_rows_are_skipped_and_counted(tmp_path):
    """Closed-unmerged and open PRs never become records; the source counts them."""
    rows = [
        gh_row(1),
        gh_row(2, state="CLOSED", mergedAt=None, mergeCommit=None),
        gh_row(3, state="OPEN", mergedAt=None, mergeCommit=None),
    ]
    prs, source = crawl(write_jsonl(tmp_path, rows))
    assert [p.number for p in prs] == [1]
    assert (source.stats.rows, source.stats.merged, source.stats.skipped_unmerged) == (3, 1, 2)


def test_window_on_merge_time(tmp_path):
    """since inclusive, until exclusive, on mergedAt."""
    rows = [gh_row(1, mergedAt="2025-01-01T00:00:00Z"), gh_row(2, mergedAt="2025-02-01T00:00:00Z")]
    prs, source = crawl(
        write_jsonl(tmp_path, rows),
        since=datetime(2025, 1, 1, tzinfo=UTC),
        until=datetime(2025, 2, 1, tzinfo=UTC),
    )
    assert [p.number for p in prs] == [1] and source.stats.outside_window == 1


def test_extension_fields_fill_issues_and_hints(tmp_path):
    """Closing-issue title/body and hintsText (optional extensions) reach the record; another repository's
    issue number is dropped (it means nothing here); the PR's review comments are never hints."""
    repo = {"name": "full-stack-fastapi-template", "owner": {"login": "fastapi"}}
    row = gh_row(
        closingIssuesReferences=[
            {
                "number": 1780,
                "repository": repo,
                "title": "Mocks are wrong",
                "body": "The unit tests mock X.",
            },
            {"number": 5, "repository": {"name": "other", "owner": {"login": "someone"}}},
            {"number": 9},
        ],
        reviewComments=["Use a soft delete here.", {"body": "  LGTM  "}, ""],
        hintsText="  The bug shows on Python 3.12 only.  ",
    )
    (pr,), _ = crawl(write_jsonl(tmp_path, [row]))
    assert [(i.number, i.title, i.body) for i in pr.closing_issues] == [
        (1780, "Mocks are wrong", "The unit tests mock X."),
        (9, "", ""),
    ]
    assert pr.hints_text == "The bug shows on Python 3.12 only."
    without = {k: v for k, v in row.items() if k != "hintsText"}
    (plain,), _ = crawl(write_jsonl(tmp_path, [without]))
    assert plain.hints_text == ""  # reviewComments alone: no hints


def test_json_array_and_missing_repo_field(tmp_path):
    """`gh` prints a JSON array by default; without `repo`, the PR url names the repository."""
    row = gh_row()
    del row["repo"]
    path = tmp_path / "prs.json"
    path.write_text(json.dumps([row], indent=2))
    (pr,), _ = crawl(path)
    assert pr.repo == "fastapi/full-stack-fastapi-template"


def test_not_json_names_file_and_line(tmp_path):
    """A broken line is reported with the file and its 1-based line number."""
    path = write_jsonl(tmp_path, [gh_row(1), "", "{not json"])
    with pytest.raises(InputError, match=r"prs\.jsonl: line 3: not valid JSON"):
        crawl(path)


@pytest.mark.parametrize(
    ("field", "change", "expected"),
    [
        ("title", None, r"line 2: field 'title': is missing"),
        ("files", None, r"line 2: field 'files': is missing"),
        ("mergedAt", None, r"line 2: field 'mergedAt': is missing on a merged PR"),
        ("mergeCommit", {"oid": "abc"}, r"line 2: field 'mergeCommit.oid': must be a full hex commit id"),
        ("createdAt", "yesterday", r"line 2: field 'createdAt': not an ISO 8601 timestamp"),
        ("number", "12", r"line 2: field 'number': must be int"),
        ("files", [{"additions": 1}], r"line 2: field 'files\[0\].path': is missing"),
    ],
)
def test_bad_field_names_file_line_and_field(tmp_path, field, change, expected):
    """A missing or malformed field fails the import with file, line and field in the message."""
    bad = gh_row(2)
    if change is None and field != "mergedAt":
        del bad[field]
    else:
        bad[field] = change
    path = write_jsonl(tmp_path, [gh_row(1), bad])
    with pytest.raises(InputError, match=expected) as info:
        crawl(path)
    assert str(path) in str(info.value)


def test_parquet_roundtrip_and_schema(tmp_path):
    """prs.parquet carries exactly PRS_SCHEMA (UTC timestamps, nullable base) and reads back equal."""
    rows = [gh_row(2), gh_row(1, closingIssuesReferences=[{"number": 3, "title": "t", "body": "b"}])]
    prs, _ = crawl(write_jsonl(tmp_path, rows))
    path = write_prs_parquet(prs, tmp_path / "out" / "prs.parquet")
    assert pq.read_schema(path).remove_metadata() == PRS_SCHEMA
    back = read_prs_parquet(path)
    assert back == sorted(prs, key=lambda p: p.number)
    assert all(PullRequest.from_row(p.to_row()) == p for p in prs)


def test_duplicate_prs_are_refused(tmp_path):
    """One row per PR in prs.parquet: a duplicated number is an input error, not a silent overwrite."""
    prs, _ = crawl(write_jsonl(tmp_path, [gh_row(1), gh_row(1)]))
    with pytest.raises(InputError, match="duplicate PR"):
        write_prs_parquet(prs, tmp_path / "prs.parquet")


def test_record_refuses_bad_values():
    """The record checks itself: naive timestamps, short shas and malformed repos never get in."""
    base = dict(
        source="s",
        repo="o/r",
        number=1,
        title="t",
        body="",
        author="a",
        author_login_raw="a",
        author_is_bot=False,
        labels=(),
        files=(),
        additions=0,
        deletions=0,
        changed_files=0,
        merge_commit=SHA,
        base_commit=None,
        head_commit=SHA,
        base_ref="main",
        head_ref="x",
        default_branch="main",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        merged_at=datetime(2025, 1, 2, tzinfo=UTC),
        url="u",
    )
    PullRequest(**base)
    for bad in (
        {"merged_at": datetime(2025, 1, 2)},
        {"base_commit": "abc123"},
        {"repo": "nope"},
        {"number": 0},
        {"crawled_from": "ftp"},
    ):
        with pytest.raises(ValueError):
            PullRequest(**(base | bad))


@pytest.mark.skipif(not REAL_EXPORT.exists(), reason="real export not available outside the workspace")
def test_real_template_export_imports_cleanly():
    """The real 629-PR export of fastapi/full-stack-fastapi-template imports without one error."""
    prs, source = crawl(REAL_EXPORT)
    assert len(prs) == 629 and source.stats.skipped_unmerged == 0
    assert sum(p.author_is_bot for p in prs) == 195
    assert {p.author for p in prs if p.author_is_bot} == {"dependabot[bot]"}
    published = next(p for p in prs if p.number == 1396)
    assert published.head_commit == SHA
