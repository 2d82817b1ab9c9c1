"""Crawl from GitHub through PyGithub, against a local HTTP stand-in serving recorded REST v3 shapes.

Real HTTP, real PyGithub, real urllib3 retries: only the server is a stand-in (GitHub cannot be reached
from tests). Needs no Docker, runs in the default suite in a few seconds.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.sources.crawl.base import write_prs_parquet
from tasks_lib.sources.crawl.github import GitHubPRSource, GitHubUnavailable, closing_issue_numbers

TOKEN = "ghp_pbenchTestToken0123456789SECRET"
SINCE = datetime(2025, 2, 1, tzinfo=UTC)
UNTIL = datetime(2025, 6, 1, tzinfo=UTC)
PULLS = "/repos/acme/shop/pulls"


def _load_stand_in():
    # Loaded by path so the test does not depend on `tests` being an importable package.
    path = Path(__file__).resolve().parents[1] / "stand_ins" / "github_server.py"
    spec = importlib.util.spec_from_file_location("pbench_github_stand_in", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def server():
    with _load_stand_in().GitHubStandIn() as stand_in:
        yield stand_in


def _source(server, **kw) -> GitHubPRSource:
    params = dict(
        token=TOKEN,
        base_url=server.base_url,
        per_page=2,
        timeout_s=5,
        retries=3,
        backoff_factor=0.05,
        max_rate_limit_wait_s=4,
        seconds_between_requests=None,
    )
    return GitHubPRSource("acme/shop", "shop", **(params | kw))


def _crawl(server, **kw):
    source = _source(server, **kw)
    prs = {pr.number: pr for pr in source.iter_merged_prs(SINCE, UNTIL)}
    return source, prs


def test_merged_prs_in_window_are_normalized(server):
    """Only merged PRs inside [since, until) come out, with files, labels, shas, closing issues and hints."""
    source, prs = _crawl(server)
    assert sorted(prs) == [10, 11, 12]  # 14 open, 13 closed unmerged, 9 merged before the window
    pr = prs[11]
    assert pr.crawled_from == "github" and pr.default_branch == "main"
    assert pr.title == "✨ Archive items" and pr.author == "alice" and not pr.author_is_bot
    assert pr.labels == ("feature",)
    assert [(f.path, f.additions, f.deletions) for f in pr.files] == [
        ("backend/app/api/routes/items.py", 12, 2),
        ("backend/tests/api/test_items.py", 30, 0),
        ("frontend/src/routes/items.tsx", 8, 1),
        ("frontend/tests/items.spec.ts", 25, 0),
    ]
    assert (pr.additions, pr.deletions, pr.changed_files) == (75, 3, 4)
    assert pr.base_commit != pr.head_commit == pr.merge_commit and len(pr.base_commit) == 40
    assert pr.base_ref == "main" and pr.head_ref == "pr-11"
    assert pr.merged_at == datetime(2025, 4, 20, 16, 30, tzinfo=UTC)
    assert pr.url == "https://github.com/acme/shop/pull/11"
    # closes #7, fixes acme/shop#8; #99 does not exist and is ignored without retries.
    assert [(i.number, i.title) for i in pr.closing_issues] == [
        (7, "Archive items instead of deleting them"),
        (8, "Archived items appear in the item list"),
    ]
    assert "archive items so that old orders" in pr.closing_issues[0].body
    assert len(server.hits("/repos/acme/shop/issues/99")) == 1
    # SWE-bench's hints: human comments on the closing issues made before the PR's first commit (2025-04-10
    # 12:00), oldest first; the bot's comment and the one after the first commit left out, and never the PR's
    # own review or conversation comments (they discuss the fix).
    assert pr.hints_text.split("\n\n") == [
        "Old orders reference archived items, so deleting breaks the order page.",
        "The list should hide them by default.",
    ]
    assert "include_archived" not in pr.hints_text and "Fixed by" not in pr.hints_text
    # What the agent is told: the closing issues' titles and bodies, never the PR's description (which
    # describes the fix); the note names the issues.
    from tasks_lib.curation import packaging

    statement, note = packaging.problem_statement(pr)
    assert (
        statement.startswith("Archive items instead of deleting them\n") and pr.body.strip() not in statement
    )
    assert "Archived items appear in the item list\n" in statement
    assert note == f"{packaging.ISSUE_NOTE} (#7, #8)."
    assert prs[10].base_ref == "release-1.x"  # crawled as-is; the filter judges the branch
    assert source.stats.unmerged == 1 and source.stats.failed == {}


def test_bot_flag_from_user_type(server):
    """A user of type Bot is a bot author; its login is kept verbatim."""
    _, prs = _crawl(server)
    assert prs[12].author_is_bot and prs[12].author == prs[12].author_login_raw == "dependabot[bot]"


def test_listing_stops_at_first_pr_updated_before_window(server):
    """Sorted by update time, the crawl stops paging once a PR was last updated before `since`."""
    _crawl(server)
    pages = sorted(int(r.query.get("page", ["1"])[0]) for r in server.hits(PULLS))
    assert pages == [1, 2, 3]  # page 4 (PRs 4 and 3) is never requested
    assert not server.hits(f"{PULLS}/9")
    listing = server.hits(PULLS)[0].query
    assert (
        listing["state"] == ["closed"] and listing["sort"] == ["updated"] and listing["direction"] == ["desc"]
    )


def test_rate_limit_waits_for_reset_instead_of_failing(server):
    """A 403 with X-RateLimit-Remaining 0 waits until X-RateLimit-Reset, then the same request succeeds."""
    server.fail_next(f"{PULLS}/11/files", "rate_limit")
    started = time.monotonic()
    _, prs = _crawl(server)
    elapsed = time.monotonic() - started
    assert len(prs[11].files) == 4
    first_page = [r.status for r in server.hits(f"{PULLS}/11/files") if "page" not in r.query]
    assert first_page == [403, 200]
    assert 0.5 <= elapsed < 5


def test_retry_after_and_429_are_honoured(server):
    """Secondary limits (403 + Retry-After) and 429 wait the announced time and retry."""
    server.fail_next(f"{PULLS}/12", "retry_after")
    server.fail_next(f"{PULLS}/10/files", "too_many")
    started = time.monotonic()
    _, prs = _crawl(server)
    assert sorted(prs) == [10, 11, 12]
    assert [r.status for r in server.hits(f"{PULLS}/12")] == [403, 200]
    assert [r.status for r in server.hits(f"{PULLS}/10/files") if "page" not in r.query] == [429, 200]
    assert time.monotonic() - started < 5


def test_rate_limit_wait_is_capped(server):
    """A reset further away than max_rate_limit_wait_s fails fast as GitHubUnavailable, not a long sleep."""
    server.reset_in_s = 600
    server.fail_next(f"{PULLS}/11", "rate_limit")
    started = time.monotonic()
    with pytest.raises(GitHubUnavailable, match="exceeds the allowed wait"):
        _crawl(server, max_rate_limit_wait_s=2)
    assert time.monotonic() - started < 5


def test_transient_5xx_is_retried(server):
    """A 502 is transient: retried, and the crawl's output is unchanged."""
    server.fail_next("/repos/acme/shop/issues/7", "bad_gateway")
    _, prs = _crawl(server)
    assert [i.number for i in prs[11].closing_issues] == [7, 8]
    assert [r.status for r in server.hits("/repos/acme/shop/issues/7")] == [502, 200]


def test_exhausted_retries_raise_unavailable(server):
    """5xx beyond the retry budget is an infrastructure failure, reported as such (not an empty crawl)."""
    server.fail_next(f"{PULLS}/11/files", "bad_gateway", times=10)
    with pytest.raises(GitHubUnavailable) as err:
        _crawl(server, retries=2)
    assert len(server.hits(f"{PULLS}/11/files")) == 3
    # ... and the class the crawl task's retry condition accepts: the task retries, with a growing delay.
    from flows.curation import _is_transient, crawl

    class Failed:
        def result(self):
            raise err.value

    assert _is_transient(Failed())
    assert crawl.retries >= 2 and list(crawl.retry_delay_seconds) == sorted(crawl.retry_delay_seconds)


def test_the_rate_budget_counts_the_requests_a_pr_costs(server):
    """Slots of the GitHub budget per PR = the REST requests it may cost (the PR, its files, per closing issue
    the issue and its comments, the PR's commits when it closes one), never fewer than the stand-in saw."""
    source = _source(server, per_page=100)
    prs = {pr.number: pr for pr in source.iter_merged_prs(SINCE, UNTIL)}
    import json as _json

    body = _json.loads((server.fixtures / "repos/acme/shop/pulls/11.json").read_text())["body"]
    own = [
        r
        for r in server.requests
        if r.path.startswith((f"{PULLS}/11", "/repos/acme/shop/issues/"))
        and not r.path.startswith(("/repos/acme/shop/issues/10", "/repos/acme/shop/issues/12"))
    ]
    # Counted before the fetch, from the body: #99 does not exist (404, no comments fetched), one slot too many,
    # never one too few.
    assert 11 in prs and source.requests_for(body) == len(own) + 1, [r.path for r in own]
    assert source.requests_for("no closing issue") == 2


def test_422_is_not_retried_and_skips_only_that_pr(server):
    """A permanent error is never retried; the PR is skipped with a reason, the rest of the crawl goes on."""
    server.fail_next(f"{PULLS}/10/files", "unprocessable")
    source, prs = _crawl(server)
    assert sorted(prs) == [11, 12]
    assert source.stats.failed == {10: "HTTP 422"}
    assert len(server.hits(f"{PULLS}/10/files")) == 1


def test_unknown_repository_is_an_input_error(server):
    """A repository the server does not know is the operator's input problem, named in the error."""
    with pytest.raises(InputError, match="acme/nope"):
        list(
            GitHubPRSource("acme/nope", "x", token=TOKEN, base_url=server.base_url).iter_merged_prs(
                None, None
            )
        )
    assert len(server.hits("/repos/acme/nope")) == 1


def test_token_is_sent_but_never_logged_or_stored(server, caplog, tmp_path):
    """The token reaches GitHub in the Authorization header and nowhere else: not logs, repr or Parquet."""
    caplog.set_level(logging.DEBUG)
    server.reset_in_s = 0
    server.fail_next(f"{PULLS}/11/files", "rate_limit")  # the retry path logs too
    source, prs = _crawl(server)
    assert all(TOKEN in r.headers.get("Authorization", "") for r in server.requests)
    assert TOKEN not in caplog.text
    assert any("github" in r.name for r in caplog.records)  # PyGithub's debug log was captured
    assert TOKEN not in repr(source) and TOKEN not in repr(vars(source))
    path = write_prs_parquet(prs.values(), tmp_path / "prs.parquet")
    assert TOKEN.encode() not in path.read_bytes()


def test_token_from_environment(server, monkeypatch):
    """Without a token argument, GITHUB_TOKEN is used (read when the source is built, not at import)."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_fromEnvironment42")
    source = _source(server, token=None)
    assert source.authenticated
    list(source.iter_merged_prs(SINCE, UNTIL))
    assert server.requests[0].headers["Authorization"].endswith("ghp_fromEnvironment42")


def test_closing_issue_numbers():
    """Closing keywords in any case, same-repo qualified refs and issue URLs count; other repos do not."""
    body = (
        "Closes #7, FIXES acme/shop#8. resolved: #9\n"
        "fixes other/repo#10, see #11, prefixes #12\n"
        "Resolves https://github.com/acme/shop/issues/13 and closes #7 again"
    )
    assert closing_issue_numbers(body, "acme/shop") == (7, 8, 9, 13)
    assert closing_issue_numbers(None, "acme/shop") == ()
