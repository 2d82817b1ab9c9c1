"""The PR-source interface, the normalized merged-PR record and its Parquet table (`prs.parquet`).

Three sources (GitHub, a local git mirror, a `gh pr list --json` export) yield the same `PullRequest`;
everything downstream (filter, distribution, extraction, packaging) reads only this record.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.core.errors import InputError

CRAWLED_FROM = ("github", "mirror", "export")
_REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# SHA-1 object ids, or SHA-256 for repositories created with --object-format=sha256.
_SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")

FILE_TYPE = pa.struct([("path", pa.string()), ("additions", pa.int64()), ("deletions", pa.int64())])
ISSUE_TYPE = pa.struct([("number", pa.int64()), ("title", pa.string()), ("body", pa.string())])
TIMESTAMP = pa.timestamp(
    "us", tz="UTC"
)  # every timestamp column of every table (tests/unit/test_analysis_docs.py)

PRS_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("repo", pa.string(), nullable=False),
        pa.field("number", pa.int64(), nullable=False),
        pa.field("title", pa.string(), nullable=False),
        pa.field("body", pa.string(), nullable=False),
        pa.field("author", pa.string(), nullable=False),
        pa.field("author_login_raw", pa.string(), nullable=False),
        pa.field("author_is_bot", pa.bool_(), nullable=False),
        pa.field("labels", pa.list_(pa.string()), nullable=False),
        pa.field("files", pa.list_(FILE_TYPE), nullable=False),
        pa.field("additions", pa.int64(), nullable=False),
        pa.field("deletions", pa.int64(), nullable=False),
        pa.field("changed_files", pa.int64(), nullable=False),
        pa.field("merge_commit", pa.string(), nullable=False),
        pa.field("base_commit", pa.string(), nullable=True),
        pa.field("head_commit", pa.string(), nullable=True),
        pa.field("base_ref", pa.string(), nullable=False),
        pa.field("head_ref", pa.string(), nullable=False),
        pa.field("default_branch", pa.string(), nullable=False),
        pa.field("created_at", TIMESTAMP, nullable=False),
        pa.field("merged_at", TIMESTAMP, nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("closing_issues", pa.list_(ISSUE_TYPE), nullable=False),
        pa.field("hints_text", pa.string(), nullable=False),
        pa.field("crawled_from", pa.string(), nullable=False),
    ]
)


def is_full_sha(value: str) -> bool:
    return bool(_SHA_RE.match(value))


def normalize_login(login: str) -> str:
    """One spelling per account: `gh` writes apps as `app/dependabot`, the REST API as `dependabot[bot]`."""
    login = login.strip()
    if login.startswith("app/"):
        return login.removeprefix("app/") + "[bot]"
    return login


def looks_like_bot(login: str) -> bool:
    return login.startswith("app/") or login.endswith("[bot]")


def to_utc(value: datetime | date | str, *, what: str = "timestamp") -> datetime:
    """An aware UTC datetime from an ISO 8601 string or a datetime; naive values are refused, not guessed.
    A bare date (a season's window bound) means midnight UTC of that day."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime.combine(value, time(), UTC)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what}: not an ISO 8601 timestamp: {value!r}") from None
    if not isinstance(value, datetime):
        raise ValueError(f"{what}: expected a datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise ValueError(f"{what}: timestamp has no timezone: {value.isoformat()}")
    return value.astimezone(UTC)


def in_window(when: datetime, since: datetime | date | None, until: datetime | date | None) -> bool:
    """Half-open window [since, until) on merge time; None leaves that side open."""
    return (since is None or when >= to_utc(since)) and (until is None or when < to_utc(until))


@dataclass(frozen=True)
class ChangedFile:
    path: str
    additions: int = 0
    deletions: int = 0

    def __post_init__(self) -> None:
        if not self.path or self.path.startswith("/"):
            raise ValueError(f"changed file path must be repository-relative, got {self.path!r}")
        if self.additions < 0 or self.deletions < 0:
            raise ValueError(f"{self.path}: negative line counts")

    @property
    def changed_lines(self) -> int:
        return self.additions + self.deletions


@dataclass(frozen=True)
class ClosingIssue:
    number: int
    title: str = ""
    body: str = ""


@dataclass(frozen=True)
class PullRequest:
    """One merged PR, whatever source it came from. Refuses values that would poison later stages."""

    source: str
    repo: str
    number: int
    title: str
    body: str
    author: str
    author_login_raw: str
    author_is_bot: bool
    labels: tuple[str, ...]
    files: tuple[ChangedFile, ...]
    additions: int
    deletions: int
    changed_files: int
    merge_commit: str
    base_commit: str | None
    head_commit: str | None
    base_ref: str
    head_ref: str
    default_branch: str
    created_at: datetime
    merged_at: datetime
    url: str
    closing_issues: tuple[ClosingIssue, ...] = ()
    hints_text: str = ""
    crawled_from: str = "export"

    def __post_init__(self) -> None:
        if not _REPO_RE.match(self.repo):
            raise ValueError(f"repo must look like 'owner/name', got {self.repo!r}")
        if self.number <= 0:
            raise ValueError(f"PR number must be positive, got {self.number}")
        if self.crawled_from not in CRAWLED_FROM:
            raise ValueError(
                f"crawled_from must be one of {', '.join(CRAWLED_FROM)}, got {self.crawled_from!r}"
            )
        for name in ("merge_commit", "base_commit", "head_commit"):
            value = getattr(self, name)
            if value is not None and not is_full_sha(value):
                raise ValueError(f"#{self.number}: {name} must be a full hex commit id, got {value!r}")
        # Coerce containers so records built from lists still hash and compare as values.
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "files", tuple(self.files))
        object.__setattr__(self, "closing_issues", tuple(self.closing_issues))
        object.__setattr__(self, "created_at", to_utc(self.created_at, what=f"#{self.number} created_at"))
        object.__setattr__(self, "merged_at", to_utc(self.merged_at, what=f"#{self.number} merged_at"))

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def instance_id(self) -> str:
        owner, name = self.repo.split("/", 1)
        return f"{owner}__{name}-{self.number}"

    def to_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["labels"] = list(self.labels)
        row["files"] = [
            {"path": f.path, "additions": f.additions, "deletions": f.deletions} for f in self.files
        ]
        row["closing_issues"] = [
            {"number": i.number, "title": i.title, "body": i.body} for i in self.closing_issues
        ]
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PullRequest:
        values = {name: row[name] for name in PRS_SCHEMA.names}
        values["labels"] = tuple(row["labels"] or ())
        values["files"] = tuple(ChangedFile(**f) for f in row["files"] or ())
        values["closing_issues"] = tuple(ClosingIssue(**i) for i in row["closing_issues"] or ())
        return cls(**values)


class PRSource(Protocol):
    """Anything that can list a repository's merged PRs. `since`/`until` bound the merge time."""

    def iter_merged_prs(self, since: datetime | None, until: datetime | None) -> Iterator[PullRequest]: ...


def prs_table(records: Iterable[PullRequest]) -> pa.Table:
    """Rows sorted by (repo, number): the same PRs always give the same bytes, so reruns are idempotent."""
    ordered = sorted(records, key=lambda pr: (pr.repo, pr.number))
    seen: set[tuple[str, int]] = set()
    for pr in ordered:
        key = (pr.repo, pr.number)
        if key in seen:
            raise InputError(
                f"duplicate PR {pr.repo}#{pr.number} in one prs table", instance_id=pr.instance_id
            )
        seen.add(key)
    return pa.Table.from_pylist([pr.to_row() for pr in ordered], schema=PRS_SCHEMA)


def write_table_atomic(table: pa.Table, path: Path | str) -> Path:
    """Write a Parquet file via a temporary sibling and a rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_prs_parquet(records: Iterable[PullRequest], path: Path | str) -> Path:
    return write_table_atomic(prs_table(records), path)


def read_prs_parquet(path: Path | str) -> list[PullRequest]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such prs table")
    table = pq.read_table(path)
    missing = [name for name in PRS_SCHEMA.names if name not in table.column_names]
    if missing:
        raise InputError(f"{path}: not a prs table, missing columns: {', '.join(missing)}")
    table = table.select(PRS_SCHEMA.names).cast(PRS_SCHEMA)
    return [PullRequest.from_row(row) for row in table.to_pylist()]
