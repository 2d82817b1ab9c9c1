"""PR source backed by the GitHub REST API through PyGithub.

Merged PRs come from the closed-PR list sorted by `updated` descending: a PR merged before `since` was
last updated no earlier than its merge, so the first PR updated before `since` ends the crawl.
Per PR: the full PR (sizes, base/merge shas), its files, labels, author and bot flag, closing issues
("closes/fixes/resolves #N" in the body, each issue's title and body fetched), and the human comments on
the closing issues made before the PR's first commit for `hints_text` (SWE-bench's meaning).

Waiting and retrying live in one place, `BoundedGithubRetry` (PyGithub's `GithubRetry`): a rate limit
(403/429 with `X-RateLimit-Remaining: 0` or `Retry-After`) waits for the reset, at most
`max_rate_limit_wait_s`; 5xx and connection errors are retried with backoff; 404/422 never are.
The token comes from the argument or `GITHUB_TOKEN` and lives only inside PyGithub's auth object;
PyGithub masks it in its debug log and this module never logs or stores it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import requests
from github import Auth, Consts, Github, GithubException, GithubRetry
from github.GithubException import BadCredentialsException, RateLimitExceededExceedsMaxWait

from tasks_lib.core import limits
from tasks_lib.core.errors import InfraError, InputError
from tasks_lib.sources.crawl.base import (
    ChangedFile,
    ClosingIssue,
    PullRequest,
    in_window,
    looks_like_bot,
    to_utc,
)

log = logging.getLogger(__name__)

TOKEN_ENV = "GITHUB_TOKEN"
USER_AGENT = "prototypebench-pipeline"
# Answers that say the request itself is wrong: retrying cannot help, the PR is skipped with a reason.
PERMANENT_STATUSES = frozenset({404, 410, 422})
# GitHub's closing keywords (docs: "Linking a pull request to an issue using a keyword").
_KEYWORDS = r"(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)"
CLOSING_REF = re.compile(
    rf"\b{_KEYWORDS}:?\s+(?:(?P<repo>[\w.-]+/[\w.-]+)#|https?://github\.com/(?P<url_repo>[\w.-]+/[\w.-]+)/issues/|#)"
    r"(?P<number>\d+)\b",
    re.IGNORECASE,
)


class GitHubUnavailable(InfraError):
    """GitHub did not answer usefully after the allowed waits and retries (transient: retry the task later)."""


def closing_issue_numbers(body: str | None, repo: str) -> tuple[int, ...]:
    """Issue numbers a PR body closes in its own repository, in order of mention, without duplicates. Pure."""
    out: dict[int, None] = {}
    for m in CLOSING_REF.finditer(body or ""):
        other = m["repo"] or m["url_repo"]
        if other is None or other.lower() == repo.lower():
            out[int(m["number"])] = None
    return tuple(out)


class BoundedGithubRetry(GithubRetry):
    """`GithubRetry` whose every rate-limit wait is capped, including server-sent `Retry-After`.

    PyGithub caps the reset-based wait with `max_rate_limit_wait`; urllib3 sleeps `Retry-After`
    unconditionally, so that path is capped here too. A wait over the cap raises instead of blocking.
    """

    def get_retry_after(self, response: Any) -> float | None:
        seconds = super().get_retry_after(response)
        if (
            seconds is not None
            and self.max_rate_limit_wait is not None
            and seconds > self.max_rate_limit_wait
        ):
            raise RateLimitExceededExceedsMaxWait(
                response.status,
                {"message": "Retry-After exceeds the allowed wait"},
                dict(response.headers),
                wait=seconds,
            )
        return seconds


def make_retry(retries: int, backoff_factor: float, max_rate_limit_wait_s: float) -> BoundedGithubRetry:
    return BoundedGithubRetry(
        total=retries,
        backoff_factor=backoff_factor,
        max_rate_limit_wait=max_rate_limit_wait_s,
        secondary_rate_wait=min(60.0, max_rate_limit_wait_s),
        # GithubRetry adds 403 (rate limits only, judged from the body); 429 is the other rate-limit answer.
        status_forcelist=[429, *range(500, 600)],
    )


@dataclass
class GitHubStats:
    listed: int = 0
    merged: int = 0
    unmerged: int = 0
    outside_window: int = 0
    failed: dict[int, str] = field(default_factory=dict)


@contextmanager
def _translate_errors(repo: str) -> Iterator[None]:
    try:
        yield
    except RateLimitExceededExceedsMaxWait as exc:
        raise GitHubUnavailable(
            f"GitHub rate limit for {repo}: reset in {exc.wait:.0f}s exceeds the allowed wait"
        ) from None
    except BadCredentialsException:
        raise InputError(f"GitHub rejected the credentials ({TOKEN_ENV}) for {repo}") from None
    except requests.exceptions.RequestException as exc:
        raise GitHubUnavailable(
            f"GitHub unreachable for {repo} after retries: {type(exc).__name__}"
        ) from None
    except GithubException as exc:
        if exc.status in PERMANENT_STATUSES:
            raise
        # 5xx (or a limit answer PyGithub gave up on) after PyGithub's own retries: transient, the crawl task's
        # retries (with their backoff) try again.
        raise GitHubUnavailable(f"GitHub answered HTTP {exc.status} for {repo} after retries") from None


class GitHubPRSource:
    """Merged PRs of one repository from GitHub (or any server speaking its REST v3 API at `base_url`)."""

    def __init__(
        self,
        repo: str,
        source_name: str,
        token: str | None = None,
        base_url: str | None = None,
        *,
        default_branch: str | None = None,
        per_page: int = 100,
        timeout_s: int = 30,
        retries: int = 6,
        backoff_factor: float = 1.0,
        max_rate_limit_wait_s: float = 3700.0,
        seconds_between_requests: float | None = 0.25,
    ):
        self.repo = repo
        self.source_name = source_name
        self.base_url = base_url or Consts.DEFAULT_BASE_URL
        self.default_branch = default_branch
        self.stats = GitHubStats()
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.authenticated = token is not None
        # The token goes straight into PyGithub's auth object; it is not kept on this object.
        self._gh = Github(
            auth=Auth.Token(token) if token else None,
            base_url=self.base_url,
            timeout=timeout_s,
            per_page=per_page,
            user_agent=USER_AGENT,
            retry=make_retry(retries, backoff_factor, max_rate_limit_wait_s),
            seconds_between_requests=seconds_between_requests,
        )

    def __repr__(self) -> str:
        return f"GitHubPRSource(repo={self.repo!r}, base_url={self.base_url!r}, authenticated={self.authenticated})"

    def close(self) -> None:
        self._gh.close()

    def rate_limit_remaining(self) -> int:
        with _translate_errors(self.repo):
            return self._gh.get_rate_limit().resources.core.remaining

    def iter_merged_prs(
        self, since: datetime | None = None, until: datetime | None = None
    ) -> Iterator[PullRequest]:
        self.stats = GitHubStats()
        if not self.authenticated:
            log.warning("no %s set: anonymous GitHub access is limited to 60 requests per hour", TOKEN_ENV)
        since_utc = to_utc(since) if since is not None else None
        with _translate_errors(self.repo):
            try:
                gh_repo = self._gh.get_repo(self.repo)
            except GithubException as exc:
                if exc.status in PERMANENT_STATUSES:
                    raise InputError(
                        f"GitHub repository {self.repo} not found (or the token cannot see it)"
                    ) from None
                raise
            default_branch = self.default_branch or gh_repo.default_branch
            log.info("github %s: %d core requests left", self.repo, self.rate_limit_remaining())
            for listed in gh_repo.get_pulls(state="closed", sort="updated", direction="desc"):
                self.stats.listed += 1
                if since_utc is not None and to_utc(listed.updated_at) < since_utc:
                    break  # sorted by update time: everything after this was merged before `since` too
                if listed.merged_at is None:
                    self.stats.unmerged += 1
                    continue
                if not in_window(to_utc(listed.merged_at), since, until):
                    self.stats.outside_window += 1
                    continue
                try:
                    # Slots of the shared API budget (no-op outside Prefect), one per request this PR costs.
                    limits.github_call(self.requests_for(listed.body))
                    pr = self._fetch(gh_repo, listed.number, default_branch)
                except GithubException as exc:
                    if exc.status not in PERMANENT_STATUSES:
                        raise
                    # One broken PR (deleted, unprocessable) must not sink the crawl: skip it with a reason.
                    reason = f"HTTP {exc.status}"
                    self.stats.failed[listed.number] = reason
                    log.warning("%s#%d skipped: %s", self.repo, listed.number, reason)
                    continue
                self.stats.merged += 1
                yield pr
        log.info(
            "github %s: %d listed, %d merged in window, %d unmerged, %d outside the window, %d failed",
            self.repo,
            self.stats.listed,
            self.stats.merged,
            self.stats.unmerged,
            self.stats.outside_window,
            len(self.stats.failed),
        )

    def requests_for(self, body: str | None) -> int:
        """REST requests one PR costs: the PR, its files, and per closing issue the issue and its comments,
        plus the PR's commits when there is one (the hints' cutoff)."""
        issues = len(closing_issue_numbers(body, self.repo))
        return 2 + 2 * issues + (1 if issues else 0)

    def _fetch(self, gh_repo: Any, number: int, default_branch: str) -> PullRequest:
        full = gh_repo.get_pull(number)
        issues = self._closing_issues(gh_repo, full.body)
        files = tuple(ChangedFile(f.filename, f.additions, f.deletions) for f in full.get_files())
        login = full.user.login if full.user is not None else "ghost"
        is_bot = (full.user is not None and full.user.type == "Bot") or looks_like_bot(login)
        return PullRequest(
            source=self.source_name,
            repo=self.repo,
            number=number,
            title=full.title or "",
            body=full.body or "",
            author=login,
            author_login_raw=login,
            author_is_bot=is_bot,
            labels=tuple(label.name for label in full.labels),
            files=files,
            additions=full.additions,
            deletions=full.deletions,
            changed_files=full.changed_files,
            merge_commit=full.merge_commit_sha,
            base_commit=full.base.sha,
            head_commit=full.merge_commit_sha,
            base_ref=full.base.ref,
            head_ref=full.head.ref,
            default_branch=default_branch,
            created_at=to_utc(full.created_at),
            merged_at=to_utc(full.merged_at),
            url=full.html_url,
            closing_issues=tuple(issue for issue, _ in issues),
            hints_text=self._hints(full, [raw for _, raw in issues]),
            crawled_from="github",
        )

    def _closing_issues(self, gh_repo: Any, body: str | None) -> list[tuple[ClosingIssue, Any]]:
        out = []
        for number in closing_issue_numbers(body, self.repo):
            try:
                issue = gh_repo.get_issue(number)
            except GithubException as exc:
                if exc.status not in PERMANENT_STATUSES:
                    raise
                log.info("%s: referenced issue #%d not found, ignored", self.repo, number)
                continue
            if issue.pull_request is not None:
                continue  # "closes #N" naming another PR: not an issue, no problem statement in it
            out.append((ClosingIssue(number, issue.title or "", issue.body or ""), issue))
        return out

    def _hints(self, full: Any, issues: list[Any]) -> str:
        """SWE-bench's hints: the human comments on the closing issues made before the PR's first commit,
        oldest first (never the PR's own review or conversation, which discuss the fix). Empty when there is
        no closing issue or the first commit's time is unknown."""
        if not issues:
            return ""
        try:
            first = next(iter(full.get_commits()), None)
        except GithubException as exc:
            if exc.status not in PERMANENT_STATUSES:
                raise
            return ""
        when = first.commit.author.date if first is not None and first.commit.author else None
        if when is None:
            return ""
        cutoff = to_utc(when)
        comments = []
        for issue in issues:
            try:
                comments += list(issue.get_comments())
            except GithubException as exc:
                if exc.status not in PERMANENT_STATUSES:
                    raise
        human = [
            c
            for c in comments
            if c.body
            and c.user is not None
            and c.user.type != "Bot"
            and not looks_like_bot(c.user.login)
            and to_utc(c.created_at) < cutoff
        ]
        human.sort(key=lambda c: to_utc(c.created_at))
        return "\n\n".join(c.body.strip() for c in human)
