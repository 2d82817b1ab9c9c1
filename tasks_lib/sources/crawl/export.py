"""PR source backed by an export file in the shape `gh pr list --json …` produces.

Accepts JSON Lines (one PR per line, as in `../shared/reference/fastapi-template/prs.jsonl`) or the plain
JSON array `gh` prints. Two optional extension fields are understood: `closingIssuesReferences[].title/body`
(issue text resolved at export time) and `hintsText` (SWE-bench's hints, resolved at export time: the closing
issues' comments made before the PR's first commit) for `hints_text`. The PR's own review comments
(`reviewComments`) are never hints: they discuss the fix.
Base commits are unknown in an export: `base_commit` stays null until resolved against a clone
(`tasks_lib.sources.crawl.mirror.resolve_base_commits`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tasks_lib.core.errors import InputError
from tasks_lib.sources.crawl.base import (
    ChangedFile,
    ClosingIssue,
    PullRequest,
    in_window,
    is_full_sha,
    looks_like_bot,
    normalize_login,
    to_utc,
)

log = logging.getLogger(__name__)

# Fields a row must carry, merged or not; `mergedAt`/`mergeCommit` are checked only for merged rows.
REQUIRED_FIELDS = ("number", "title", "author", "files", "baseRefName", "headRefName", "createdAt")
MERGED_STATE = "MERGED"


@dataclass
class ExportStats:
    """What one pass over the file saw; filled while iterating."""

    rows: int = 0
    merged: int = 0
    skipped_unmerged: int = 0
    outside_window: int = 0


class _Row:
    """Field access for one row that turns every problem into an InputError naming file, line and field."""

    def __init__(self, path: Path, where: str, row: Any):
        self.path, self.where = path, where
        if not isinstance(row, dict):
            raise self.fail("<row>", f"must be a JSON object, got {type(row).__name__}")
        self.row = row

    def fail(self, field: str, problem: str) -> InputError:
        return InputError(f"{self.path}: {self.where}: field '{field}': {problem}")

    def get(
        self, key: str, kind: type | tuple[type, ...], *, required: bool = True, default: Any = None
    ) -> Any:
        if key not in self.row or (self.row[key] is None and not required):
            if required:
                raise self.fail(key, "is missing")
            return default
        value = self.row[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(key, f"must be {names}, got {type(value).__name__}")
        return value


def _repo_of(r: _Row, override: str | None) -> str:
    if override:
        return override
    value = r.row.get("repo")
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict):
        if value.get("nameWithOwner"):
            return value["nameWithOwner"]
        owner = value.get("owner")
        owner = owner.get("login") if isinstance(owner, dict) else owner
        if owner and value.get("name"):
            return f"{owner}/{value['name']}"
    url = r.row.get("url")
    if isinstance(url, str) and "/pull/" in url:
        # https://github.com/<owner>/<name>/pull/<n>
        parts = url.split("/pull/")[0].rstrip("/").split("/")
        if len(parts) >= 2:
            return f"{parts[-2]}/{parts[-1]}"
    raise r.fail("repo", "is missing (and 'url' does not name the repository); pass repo=")


def _files(r: _Row) -> tuple[ChangedFile, ...]:
    out = []
    for i, item in enumerate(r.get("files", list)):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise r.fail(f"files[{i}].path", "is missing")
        try:
            out.append(
                ChangedFile(item["path"], int(item.get("additions") or 0), int(item.get("deletions") or 0))
            )
        except (TypeError, ValueError) as exc:
            raise r.fail(f"files[{i}]", str(exc)) from None
    return tuple(out)


def _labels(r: _Row) -> tuple[str, ...]:
    out = []
    for i, item in enumerate(r.get("labels", list, required=False, default=[])):
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str):
            raise r.fail(f"labels[{i}].name", "is missing")
        out.append(name)
    return tuple(out)


def _other_repo(repository: Any, repo: str) -> bool:
    if not (
        isinstance(repository, dict) and repository.get("name") and isinstance(repository.get("owner"), dict)
    ):
        return False
    return f"{repository['owner'].get('login')}/{repository['name']}".lower() != repo.lower()


def _closing_issues(r: _Row, repo: str) -> tuple[ClosingIssue, ...]:
    out = []
    for i, item in enumerate(r.get("closingIssuesReferences", list, required=False, default=[])):
        if not isinstance(item, dict) or not isinstance(item.get("number"), int):
            raise r.fail(f"closingIssuesReferences[{i}].number", "is missing")
        other = item.get("repository")
        if _other_repo(other, repo):
            continue  # an issue in another repository: its number means nothing here
        out.append(ClosingIssue(item["number"], item.get("title") or "", item.get("body") or ""))
    return tuple(out)


def _hints(r: _Row) -> str:
    return r.get("hintsText", str, required=False, default="").strip()


def _commit_oid(r: _Row, key: str) -> str | None:
    value = r.row.get(key)
    if value is None:
        return None
    oid = value.get("oid") if isinstance(value, dict) else value
    if not isinstance(oid, str):
        raise r.fail(f"{key}.oid", "is missing")
    if not is_full_sha(oid):
        raise r.fail(f"{key}.oid", f"must be a full hex commit id, got {oid!r}")
    return oid


def _timestamp(r: _Row, key: str, value: Any) -> datetime:
    try:
        return to_utc(value, what=key)
    except ValueError as exc:
        raise r.fail(key, str(exc).split(": ", 1)[-1]) from None


def parse_export_row(
    row: Any, *, path: Path, where: str, source_name: str, default_branch: str, repo: str | None = None
) -> PullRequest | None:
    """One export row as a PullRequest, or None when the PR was not merged. Pure."""
    r = _Row(path, where, row)
    for key in REQUIRED_FIELDS:
        if key not in r.row:
            raise r.fail(key, "is missing")
    state = r.get("state", str, required=False)
    merged_at = r.get("mergedAt", str, required=False)
    if (state is not None and state.upper() != MERGED_STATE) or (state is None and merged_at is None):
        return None
    if merged_at is None:
        raise r.fail("mergedAt", "is missing on a merged PR")
    merge_commit = _commit_oid(r, "mergeCommit")
    if merge_commit is None:
        raise r.fail("mergeCommit", "is missing on a merged PR")
    number = r.get("number", int)
    author = r.get("author", dict, required=False, default={"login": "ghost"})
    login = author.get("login") or "ghost"  # deleted accounts come back as null
    files = _files(r)
    repo_name = _repo_of(r, repo)
    try:
        return PullRequest(
            source=source_name,
            repo=repo_name,
            number=number,
            title=r.get("title", str),
            body=r.get("body", str, required=False, default=""),
            author=normalize_login(login),
            author_login_raw=login,
            author_is_bot=bool(author.get("is_bot")) or looks_like_bot(login),
            labels=_labels(r),
            files=files,
            additions=r.get("additions", int, required=False, default=sum(f.additions for f in files)),
            deletions=r.get("deletions", int, required=False, default=sum(f.deletions for f in files)),
            changed_files=r.get("changedFiles", int, required=False, default=len(files)),
            merge_commit=merge_commit,
            base_commit=None,
            # The post-merge commit on the default branch is the head state the task reproduces.
            head_commit=merge_commit,
            base_ref=r.get("baseRefName", str),
            # null in an export rebuilt from git history (the branch a PR came from is not in it)
            head_ref=r.get("headRefName", str, required=False, default=""),
            default_branch=default_branch,
            # unknown in an export rebuilt from git history: the merge time (tiers go by it anyway)
            created_at=_timestamp(r, "createdAt", r.get("createdAt", str, required=False) or merged_at),
            merged_at=_timestamp(r, "mergedAt", merged_at),
            url=r.get("url", str, required=False) or f"https://github.com/{repo_name}/pull/{number}",
            closing_issues=_closing_issues(r, repo_name),
            hints_text=_hints(r),
            crawled_from="export",
        )
    except ValueError as exc:
        raise r.fail("<row>", str(exc)) from None


def _iter_raw(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: export file does not exist") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc})") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
        for i, item in enumerate(items):
            yield f"item {i}", item
        return
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {line_no}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {line_no}: not valid JSON: {exc.msg}") from None


class ExportPRSource:
    """Merged PRs from a `gh pr list --json` export. Unmerged rows are skipped and counted in `stats`."""

    def __init__(self, path: Path | str, source_name: str, default_branch: str, repo: str | None = None):
        self.path = Path(path)
        self.source_name = source_name
        self.default_branch = default_branch
        self.repo = repo
        self.stats = ExportStats()

    def iter_merged_prs(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[PullRequest]:
        self.stats = ExportStats()
        for where, row in _iter_raw(self.path):
            self.stats.rows += 1
            pr = parse_export_row(
                row,
                path=self.path,
                where=where,
                source_name=self.source_name,
                default_branch=self.default_branch,
                repo=self.repo,
            )
            if pr is None:
                self.stats.skipped_unmerged += 1
                continue
            if not in_window(pr.merged_at, since, until):
                self.stats.outside_window += 1
                continue
            self.stats.merged += 1
            yield pr
        log.info(
            "export %s: %d rows, %d merged in window, %d not merged, %d outside the window",
            self.path.name,
            self.stats.rows,
            self.stats.merged,
            self.stats.skipped_unmerged,
            self.stats.outside_window,
        )
