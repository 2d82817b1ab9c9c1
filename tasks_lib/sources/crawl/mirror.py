"""PR source backed by a local git clone or mirror: merged PRs recovered from the default branch's history.

Two merge styles leave a PR number on the first-parent history of the default branch:
- a merge commit whose subject is `Merge pull request #N from owner/branch`: base = first parent,
  PR branch tip = second parent, head = the merge commit, title = first line of the merge body;
- a squash (or rebase-and-squash) commit whose subject ends in `(#N)`: base = parent, head = the commit,
  title = the subject without the suffix.
Labels, closing issues and review comments do not live in git: they stay empty here.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.sources.crawl.base import (
    ChangedFile,
    PullRequest,
    in_window,
    looks_like_bot,
    normalize_login,
    to_utc,
)
from tasks_lib.sources.gitops import git

log = logging.getLogger(__name__)

MERGE_SUBJECT = re.compile(r"^Merge pull request #(?P<number>\d+) from (?P<from>\S+)")
SQUASH_SUBJECT = re.compile(r"^(?P<title>.+) \(#(?P<number>\d+)\)$")
# NUL between fields, RS between commits: neither can occur in a subject or an ISO date.
_LOG_FORMAT = "%H%x00%P%x00%an%x00%aI%x00%cI%x00%s%x00%b%x1e"


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    author: str
    authored_at: datetime
    committed_at: datetime
    subject: str
    body: str


@dataclass(frozen=True)
class PRCommit:
    """What a default-branch commit says about the PR it merged (pure parse of the commit)."""

    number: int
    style: str  # "merge" | "squash"
    title: str
    body: str
    head_ref: str


@dataclass
class MirrorStats:
    commits: int = 0
    merges: int = 0
    squashes: int = 0
    duplicates: int = 0
    outside_window: int = 0
    unreadable: int = 0  # a PR whose commits the clone lacks (a partial snapshot): skipped, named in the log


def parse_log(output: str) -> list[Commit]:
    """Commits from `git log --format=_LOG_FORMAT` output. Pure."""
    commits = []
    for record in output.split("\x1e"):
        record = record.lstrip("\n")
        if not record:
            continue
        sha, parents, author, authored, committed, subject, body = record.split("\x00", 6)
        commits.append(
            Commit(
                sha,
                tuple(parents.split()),
                author,
                to_utc(authored),
                to_utc(committed),
                subject,
                body.strip(),
            )
        )
    return commits


def classify_commit(commit: Commit) -> PRCommit | None:
    """The PR a first-parent commit merged, or None for a direct push or a non-PR merge. Pure."""
    if len(commit.parents) == 2:
        m = MERGE_SUBJECT.match(commit.subject)
        if not m:
            return None
        lines = commit.body.splitlines()
        title = lines[0].strip() if lines else ""
        body = "\n".join(lines[1:]).strip()
        # "owner/branch" (or "owner:branch" in some forks): the branch is what follows the owner.
        head_ref = re.split(r"[/:]", m["from"], maxsplit=1)[-1]
        return PRCommit(int(m["number"]), "merge", title or head_ref, body, head_ref)
    if len(commit.parents) == 1:
        m = SQUASH_SUBJECT.match(commit.subject)
        if not m:
            return None
        return PRCommit(int(m["number"]), "squash", m["title"].strip(), commit.body, "")
    return None


def parse_numstat(output: bytes) -> tuple[ChangedFile, ...]:
    """Files from `git diff --numstat -z --no-renames`; binary files ('-') count 0/0. Pure."""
    files = []
    for entry in output.split(b"\x00"):
        if not entry.strip():
            continue
        added, deleted, path = entry.decode("utf-8", errors="surrogateescape").lstrip("\n").split("\t", 2)
        files.append(
            ChangedFile(path, int(added) if added != "-" else 0, int(deleted) if deleted != "-" else 0)
        )
    return tuple(files)


class MirrorPRSource:
    """Merged PRs of `repo` recovered from the default branch of a local clone (bare or not)."""

    def __init__(
        self,
        repo_dir: Path | str,
        source_name: str,
        repo: str,
        default_branch: str,
        *,
        git_timeout_s: float = 120,
    ):
        self.repo_dir = Path(repo_dir)
        self.source_name = source_name
        self.repo = repo
        self.default_branch = default_branch
        self.git_timeout_s = git_timeout_s
        self.stats = MirrorStats()

    def _git(self, *args: str) -> bytes:
        return git(list(args), cwd=self.repo_dir, timeout=self.git_timeout_s).stdout

    def _check(self) -> None:
        if not self.repo_dir.is_dir():
            raise InputError(f"{self.repo_dir}: mirror directory does not exist")
        probe = git(
            ["rev-parse", "--verify", "--quiet", f"{self.default_branch}^{{commit}}"],
            cwd=self.repo_dir,
            check=False,
            timeout=self.git_timeout_s,
        )
        if probe.returncode != 0:
            raise InputError(
                f"{self.repo_dir}: not a git repository with a branch {self.default_branch!r} "
                f"(the source's default_branch)"
            )

    def iter_merged_prs(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[PullRequest]:
        self._check()
        self.stats = MirrorStats()
        out = self._git("log", "--first-parent", f"--format={_LOG_FORMAT}", self.default_branch, "--")
        seen: set[int] = set()
        for commit in parse_log(out.decode("utf-8", errors="replace")):
            self.stats.commits += 1
            found = classify_commit(commit)
            if found is None:
                continue
            if found.number in seen:
                # A PR number merged twice (a revert and a re-merge): the newest merge wins.
                self.stats.duplicates += 1
                continue
            seen.add(found.number)
            if not in_window(commit.committed_at, since, until):
                self.stats.outside_window += 1
                continue
            try:
                pr = self._to_pr(commit, found)
            except PbenchError as exc:
                # A snapshot that lacks a PR's objects (a shallow or partial mirror) loses that PR, never the
                # season: the PR is named with git's own words and counted.
                self.stats.unreadable += 1
                log.warning(
                    "mirror %s: PR #%d (commit %s) skipped, its objects are not in the clone: %s",
                    self.repo_dir,
                    found.number,
                    commit.sha[:12],
                    str(exc).strip().splitlines()[-1] if str(exc).strip() else exc,
                )
                continue
            if found.style == "merge":
                self.stats.merges += 1
            else:
                self.stats.squashes += 1
            yield pr
        log.info(
            "mirror %s: %d commits, %d merge PRs, %d squash PRs, %d outside the window, %d unreadable",
            self.repo_dir,
            self.stats.commits,
            self.stats.merges,
            self.stats.squashes,
            self.stats.outside_window,
            self.stats.unreadable,
        )

    def _to_pr(self, commit: Commit, found: PRCommit) -> PullRequest:
        base = commit.parents[0]
        author, created_at = commit.author, commit.authored_at
        if found.style == "merge":
            tip = commit.parents[1]
            pr_commits = parse_log(
                self._git("log", f"--format={_LOG_FORMAT}", f"{base}..{tip}", "--").decode()
            )
            tip_commit = next((c for c in pr_commits if c.sha == tip), None)
            if tip_commit is not None:
                author = tip_commit.author
            if pr_commits:
                created_at = min(c.authored_at for c in pr_commits)
        files = parse_numstat(self._git("diff", "--numstat", "-z", "--no-renames", base, commit.sha, "--"))
        return PullRequest(
            source=self.source_name,
            repo=self.repo,
            number=found.number,
            title=found.title,
            body=found.body,
            author=normalize_login(author),
            author_login_raw=author,
            author_is_bot=looks_like_bot(author),
            labels=(),
            files=files,
            additions=sum(f.additions for f in files),
            deletions=sum(f.deletions for f in files),
            changed_files=len(files),
            merge_commit=commit.sha,
            base_commit=base,
            head_commit=commit.sha,
            base_ref=self.default_branch,
            head_ref=found.head_ref,
            default_branch=self.default_branch,
            created_at=created_at,
            merged_at=commit.committed_at,
            url=f"https://github.com/{self.repo}/pull/{found.number}",
            crawled_from="mirror",
        )


def resolve_base_commits(
    prs: Iterable[PullRequest], repo_dir: Path | str, *, git_timeout_s: float = 60
) -> list[PullRequest]:
    """Fill `base_commit` (first parent of the merge commit) where an export left it null.

    A merge commit the clone does not have keeps base_commit null; later stages reject that PR with a
    reason instead of the batch failing.
    """
    out = []
    for pr in prs:
        if pr.base_commit is None:
            proc = git(
                ["rev-parse", "--verify", "--quiet", f"{pr.merge_commit}^1"],
                cwd=Path(repo_dir),
                check=False,
                timeout=git_timeout_s,
            )
            if proc.returncode == 0:
                pr = dataclasses.replace(pr, base_commit=proc.stdout.decode().strip())
            else:
                log.warning("%s: merge commit %s not in %s", pr.instance_id, pr.merge_commit, repo_dir)
        out.append(pr)
    return out
