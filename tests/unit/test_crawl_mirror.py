"""Crawl from a local git mirror: both merge styles recovered from a real repository built in a tmp dir."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.sources.crawl.base import PullRequest, read_prs_parquet, write_prs_parquet
from tasks_lib.sources.crawl.mirror import (
    Commit,
    MirrorPRSource,
    classify_commit,
    parse_numstat,
    resolve_base_commits,
)

REPO = "acme/shop"


def _git(repo: Path, *args: str, author: str = "Dev", when: str = "2025-03-01T10:00:00+00:00") -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": author,
        "GIT_AUTHOR_EMAIL": f"{author.replace('[', '').replace(']', '')}@example.com",
        "GIT_COMMITTER_NAME": "GitHub",
        "GIT_COMMITTER_EMAIL": "noreply@github.com",
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_DATE": when,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
    }
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return proc.stdout.strip()


def _write(repo: Path, rel: str, text: str | bytes) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


def _commit(repo: Path, message: str, **kw: str) -> str:
    _git(repo, "add", "-A", **kw)
    _git(repo, "commit", "-q", "-m", message, **kw)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> dict[str, str]:
    """main: init → merge PR #1 (2 commits, feature branch) → squash PR #2 → direct push → bot squash #3."""
    repo = tmp_path_factory.mktemp("mirror") / "shop"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _write(repo, "backend/app/main.py", "app = 1\n")
    _write(repo, "README.md", "# shop\n")
    shas = {"init": _commit(repo, "Initial commit", when="2025-01-01T09:00:00+00:00")}

    _git(repo, "checkout", "-q", "-b", "feature/items")
    _write(repo, "backend/app/items.py", "def items():\n    return []\n")
    _commit(repo, "Add items", author="Alice", when="2025-02-01T09:00:00+00:00")
    _write(repo, "backend/tests/test_items.py", "def test_items():\n    assert True\n")
    _write(repo, "frontend/logo.png", b"\x89PNG\x00\x01\x02binary")
    shas["tip"] = _commit(repo, "Test items", author="Alice", when="2025-02-03T09:00:00+00:00")
    _git(repo, "checkout", "-q", "main")
    _git(
        repo,
        "merge",
        "-q",
        "--no-ff",
        "feature/items",
        "-m",
        "Merge pull request #1 from alice/feature/items\n\n✨ Add items endpoint",
        when="2025-02-05T12:00:00+00:00",
    )
    shas["merge1"] = _git(repo, "rev-parse", "HEAD")

    _write(repo, "backend/app/main.py", "app = 2\nversion = 2\n")
    _write(repo, "frontend/src/App.tsx", "export const App = () => null\n")
    shas["squash2"] = _commit(
        repo, "🐛 Fix app version (#2)\n\nCloses #7", author="Bob", when="2025-03-10T08:00:00+00:00"
    )

    _write(repo, "README.md", "# shop\n\nDirect push.\n")
    shas["direct"] = _commit(repo, "Update README", when="2025-03-11T08:00:00+00:00")

    _write(repo, "frontend/package.json", '{"name": "shop"}\n')
    shas["squash3"] = _commit(
        repo, "⬆ Bump vite (#3)", author="dependabot[bot]", when="2025-04-01T08:00:00+00:00"
    )
    return {"dir": str(repo), **shas}


def _prs(history, since=None, until=None) -> dict[int, PullRequest]:
    source = MirrorPRSource(history["dir"], "shop", REPO, "main")
    return {pr.number: pr for pr in source.iter_merged_prs(since, until)}


def test_merge_commit_pr_recovered(history):
    """Merge style: base = first parent, head = merge commit, title from the merge body, created = earliest
    author date of the branch commits, author = branch tip's author, binary files count 0/0."""
    pr = _prs(history)[1]
    assert pr.title == "✨ Add items endpoint"
    assert pr.base_commit == history["init"]
    assert pr.head_commit == pr.merge_commit == history["merge1"]
    assert pr.head_ref == "feature/items"
    assert pr.author == "Alice" and not pr.author_is_bot
    assert pr.created_at == datetime(2025, 2, 1, 9, tzinfo=UTC)
    assert pr.merged_at == datetime(2025, 2, 5, 12, tzinfo=UTC)
    files = {f.path: (f.additions, f.deletions) for f in pr.files}
    assert files == {
        "backend/app/items.py": (2, 0),
        "backend/tests/test_items.py": (2, 0),
        "frontend/logo.png": (0, 0),
    }
    assert (pr.additions, pr.deletions, pr.changed_files) == (4, 0, 3)
    assert pr.crawled_from == "mirror" and pr.url == "https://github.com/acme/shop/pull/1"


def test_squash_commit_pr_recovered(history):
    """Squash style: base = parent, head = the commit, title = subject without `(#N)`, body kept."""
    pr = _prs(history)[2]
    assert pr.title == "🐛 Fix app version"
    assert pr.body == "Closes #7"
    assert pr.base_commit == history["merge1"] and pr.head_commit == history["squash2"]
    assert pr.created_at == pr.merged_at == datetime(2025, 3, 10, 8, tzinfo=UTC)
    assert {f.path: (f.additions, f.deletions) for f in pr.files} == {
        "backend/app/main.py": (2, 1),
        "frontend/src/App.tsx": (1, 0),
    }
    assert pr.base_ref == pr.default_branch == "main"


def test_direct_pushes_are_not_prs_and_bots_are_flagged(history):
    """Only PR-shaped commits become records; a `[bot]` author name is a bot."""
    prs = _prs(history)
    assert sorted(prs) == [1, 2, 3]
    assert prs[3].author_is_bot and prs[3].author == "dependabot[bot]"


def test_window_is_half_open_on_merge_time(history):
    """since is inclusive, until exclusive, on the committer (merge) date."""
    prs = _prs(history, since=datetime(2025, 3, 10, 8, tzinfo=UTC), until=datetime(2025, 4, 1, 8, tzinfo=UTC))
    assert sorted(prs) == [2]


def test_mirror_records_roundtrip_through_parquet(history, tmp_path):
    """prs.parquet written from the mirror reads back to equal records."""
    prs = list(_prs(history).values())
    path = write_prs_parquet(prs, tmp_path / "prs.parquet")
    assert read_prs_parquet(path) == sorted(prs, key=lambda p: p.number)


def test_resolve_base_commits_fills_first_parent(history):
    """An export leaves base_commit null; resolving against a clone fills the merge's first parent."""
    import dataclasses

    pr = dataclasses.replace(_prs(history)[2], base_commit=None)
    (resolved,) = resolve_base_commits([pr], history["dir"])
    assert resolved.base_commit == history["merge1"]
    missing = dataclasses.replace(pr, merge_commit="f" * 40)
    assert resolve_base_commits([missing], history["dir"])[0].base_commit is None


def test_missing_branch_is_an_input_error(history, tmp_path):
    """A wrong default branch or a non-repository names the directory, not a raw git traceback."""
    with pytest.raises(InputError, match="branch 'trunk'"):
        list(MirrorPRSource(history["dir"], "shop", REPO, "trunk").iter_merged_prs(None, None))
    with pytest.raises(InputError, match="does not exist"):
        list(MirrorPRSource(tmp_path / "nope", "shop", REPO, "main").iter_merged_prs(None, None))


def test_pr_whose_objects_the_clone_lacks_is_skipped_not_fatal(history, tmp_path):
    """A partial snapshot (a PR commit's tree missing) loses that PR, counted, and keeps every other one."""
    import shutil

    repo = tmp_path / "partial"
    shutil.copytree(history["dir"], repo)
    tree = _git(repo, "rev-parse", f"{history['squash2']}^{{tree}}")
    (repo / ".git" / "objects" / tree[:2] / tree[2:]).unlink()
    source = MirrorPRSource(repo, "shop", REPO, "main")
    numbers = sorted(pr.number for pr in source.iter_merged_prs(None, None))
    assert numbers == [1, 3]
    assert source.stats.unreadable == 1


def test_classify_commit_rules():
    """Pure parse: non-PR merges and plain subjects are not PRs; the last `(#N)` is the PR number."""
    when = datetime(2025, 1, 1, tzinfo=UTC)

    def commit(subject, parents=("a",), body=""):
        return Commit("c", parents, "x", when, when, subject, body)

    assert classify_commit(commit("Merge branch 'dev'", ("a", "b"))) is None
    assert classify_commit(commit("Fix things")) is None
    assert classify_commit(commit("Fix (#12) again (#34)")).number == 34
    assert classify_commit(commit("Merge pull request #5 from o/x", ("a", "b"), "")).title == "x"
    # A single-parent commit titled like a merge is a squash only when it ends in (#N).
    assert classify_commit(commit("Merge pull request #5 from o/x")) is None


def test_numstat_binary_and_odd_paths():
    """Binary files ('-') count 0/0; paths with spaces or tabs survive -z output."""
    files = parse_numstat(b"3\t1\tsrc/a b.py\x00-\t-\timg/logo.png\x000\t2\tdir/tab\there.txt\x00")
    assert [(f.path, f.additions, f.deletions) for f in files] == [
        ("src/a b.py", 3, 1),
        ("img/logo.png", 0, 0),
        ("dir/tab\there.txt", 0, 2),
    ]


@pytest.mark.skipif(
    importlib.util.find_spec("tasks_lib.sources.demo_repo") is None,
    reason="tasks_lib.sources.demo_repo not written yet",
)
def test_demo_repo_mirror_agrees_with_its_export():
    """The generated demo history crawled as a mirror gives the same PRs, merge commits, titles, files
    and merge times as its gh-shaped export: two sources, one normalized record."""
    from tasks_lib.sources.crawl.export import ExportPRSource
    from tasks_lib.sources.demo_repo import DEMO_PRS, demo_prs_path, ensure_demo_repo
    from tasks_lib.sources.record import load_source

    source = load_source("demo")
    repo_dir = ensure_demo_repo()
    mirror = MirrorPRSource(repo_dir, source.name, source.repo, source.default_branch)
    export = ExportPRSource(demo_prs_path(repo_dir), source.name, source.default_branch)
    from_mirror = {pr.number: pr for pr in mirror.iter_merged_prs(None, None)}
    from_export = {pr.number: pr for pr in export.iter_merged_prs(None, None)}
    assert sorted(from_mirror) == sorted(from_export) == sorted(DEMO_PRS.values())
    for number, pr in from_mirror.items():
        other = from_export[number]
        assert (pr.merge_commit, pr.title, pr.files, pr.merged_at) == (
            other.merge_commit,
            other.title,
            other.files,
            other.merged_at,
        )
        assert pr.base_commit is not None and pr.author_is_bot == other.author_is_bot
