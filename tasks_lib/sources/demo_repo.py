"""The embedded demo source, built from data: a small full-stack repository (FastAPI + SQLModel + Postgres,
Vite + React with Playwright) and its eight merged pull requests, one of each kind the pipeline must handle.

The history is data under `data/demo/`: `history.toml` (people, labels, the initial commit, the pull requests
with their commits, messages, dates, closing issues and review comments) and `commits/<id>/`, the files each
commit writes (as they are after it; `deleted` lists what it removes). `generate_demo_repo(dest)` builds the git
repository and beside it `prs.jsonl`, shaped like `gh pr list --state merged --json ...`, with the real merge
SHAs and per-file line counts: same data, same SHAs on any machine (`gitops.PinnedGit`). The browser talks
only to the Vite server, which proxies `/api` to the backend (`API_PROXY_TARGET`, default localhost:8000).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.sources import gitops

__all__ = [
    "DEMO_PRS",
    "FLAKY_MISS_BOUND",
    "FLAKY_TEST_ID",
    "FLAKY_TEST_IDS",
    "FRONTEND_FAIL_TO_PASS",  # noqa: F822 (module __getattr__: derived from the data when first asked)
    "GENERATOR_VERSION",
    "REPO",
    "demo_prs_path",
    "ensure_demo_repo",
    "fingerprint",
    "generate_demo_repo",
]

# Bump on any change of how the history is built (the data is part of the fingerprint anyway).
GENERATOR_VERSION = "2"

REPO = "prototypebench/demo-fullstack"
REPO_URL = f"https://github.com/{REPO}"
MARKER_NAME = "pbench-demo-version"
PRS_FILE_NAME = "prs.jsonl"

# Kind of pull request -> its number in the history (data/demo/history.toml says the same; checked at build).
DEMO_PRS: dict[str, int] = {
    "feature": 3,
    "bugfix": 5,
    "collection_error": 8,
    "docs": 9,
    "bot_bump": 11,
    "flaky": 12,
    "frontend_only": 14,
    "fullstack": 16,
}

# The deliberately flaky test added by the "flaky" PR, in four parametrized copies that each draw one of four
# failing outcomes per run; node ids are relative to `backend/`. Its docstring computes the bound: the
# extraction's three head runs and two base runs miss one copy with probability 1/64, all four with 2**-24.
FLAKY_TEST_ID = "tests/test_items.py::test_list_items_flaky"
FLAKY_TEST_IDS = tuple(f"{FLAKY_TEST_ID}[{copy}]" for copy in (1, 2, 3, 4))
FLAKY_MISS_BOUND = (1 / 64) ** len(FLAKY_TEST_IDS)
FRONTEND_SPEC_PATH = "frontend/tests/items.spec.js"


def data_dir() -> Path:
    return paths.data_dir() / "demo"


# ----------------------------------------------------------------------------- the history, from data/demo


@dataclass(frozen=True)
class _Person:
    name: str
    email: str
    login: str
    node_id: str = ""
    is_bot: bool = False

    def as_gh_author(self) -> dict:
        """The `author` object of `gh pr list --json author` (bots carry only login and is_bot)."""
        if self.is_bot:
            return {"is_bot": True, "login": self.login}
        return {"id": self.node_id, "is_bot": False, "login": self.login, "name": self.name}


@dataclass(frozen=True)
class _Commit:
    message: str
    date: str  # ISO 8601, UTC ("Z")
    changes: dict[str, str | None]  # path -> new content, or None to delete


@dataclass(frozen=True)
class _Issue:
    number: int
    body: str


@dataclass(frozen=True)
class _PullRequest:
    number: int
    kind: str
    title: str
    body: str
    author: _Person
    labels: tuple[str, ...]
    head_ref: str
    created_at: str
    merged_at: str
    merged_by: _Person
    squash: bool  # True: one squash commit on main; False: a merge commit of the branch (`--no-ff`)
    commits: tuple[_Commit, ...]
    closes: tuple[_Issue, ...] = ()
    review_decision: str = ""
    review_comments: tuple[str, ...] = ()


@dataclass(frozen=True)
class _History:
    people: dict[str, _Person]
    labels: dict[str, dict]
    initial: _Commit
    initial_author: _Person
    pull_requests: tuple[_PullRequest, ...]


def _commit(entry: dict) -> _Commit:
    folder = data_dir() / "commits" / entry["id"]
    changes: dict[str, str | None] = {
        str(p.relative_to(folder)): p.read_bytes().decode("utf-8")
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    changes |= dict.fromkeys(entry.get("deleted", []))
    return _Commit(entry["message"], entry["date"], changes)


@functools.cache
def _history() -> _History:
    raw = tomllib.loads((data_dir() / "history.toml").read_text(encoding="utf-8"))
    people = {k: _Person(**v) for k, v in raw["people"].items()}
    plain = ("number", "kind", "title", "body", "head_ref", "created_at", "merged_at", "squash")
    prs = tuple(
        _PullRequest(
            **{k: pr[k] for k in plain},
            author=people[pr["author"]],
            merged_by=people[pr["merged_by"]],
            labels=tuple(pr["labels"]),
            commits=tuple(_commit(c) for c in pr["commits"]),
            closes=tuple(_Issue(i["number"], i["body"]) for i in pr.get("closes", [])),
            review_decision=pr.get("review_decision", ""),
            review_comments=tuple(pr.get("review_comments", [])),
        )
        for pr in raw["pull_requests"]
    )
    if {pr.kind: pr.number for pr in prs} != DEMO_PRS:
        raise InputError(f"{data_dir() / 'history.toml'}: its pull requests are not DEMO_PRS {DEMO_PRS}")
    initial = raw["initial"]
    return _History(people, raw["labels"], _commit(initial), people[initial["author"]], prs)


_SPEC_TEST_CALL = re.compile(r"^(?P<indent> *)test\('(?P<title>[^']+)'", re.MULTILINE)


def _spec_tests(spec_text: str) -> dict[str, str]:
    """title -> PrototypeBench id (`tests/items.spec.js:LINE:COL › Items › title`, frontend-relative, as
    tasks_lib/formats/playwright_report.py builds them) of the `test(...)` calls of the spec."""
    rel = FRONTEND_SPEC_PATH.removeprefix("frontend/")
    out = {}
    for match in _SPEC_TEST_CALL.finditer(spec_text):
        line = spec_text.count("\n", 0, match.start()) + 1
        column = len(match.group("indent")) + 1
        out[match.group("title")] = f"{rel}:{line}:{column} › Items › {match.group('title')}"
    return out


@functools.cache
def _frontend_fail_to_pass() -> dict[str, tuple[str, ...]]:
    """The Playwright tests each frontend PR adds (they fail at its base, with its test patch, and pass at
    head): the spec's tests after the PR that it did not have before."""
    history = _history()
    spec = history.initial.changes[FRONTEND_SPEC_PATH]
    out = {}
    for pr in history.pull_requests:
        before = _spec_tests(spec)
        for commit in pr.commits:
            spec = commit.changes.get(FRONTEND_SPEC_PATH) or spec
        if pr.kind in ("frontend_only", "fullstack"):
            out[pr.kind] = tuple(
                test_id for title, test_id in _spec_tests(spec).items() if title not in before
            )
    return out


def __getattr__(name: str):
    # Derived from the data when first asked, never at import.
    if name == "FRONTEND_FAIL_TO_PASS":
        return _frontend_fail_to_pass()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- building the repository


def fingerprint() -> str:
    """Changes whenever this module (the builder), the data of data/demo or GENERATOR_VERSION changes."""
    digest = hashlib.sha256()
    digest.update(GENERATOR_VERSION.encode() + b"\0")
    digest.update(Path(__file__).read_bytes())
    for path in sorted(p for p in data_dir().rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(data_dir())).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{GENERATOR_VERSION}-{digest.hexdigest()}"


def demo_prs_path(repo_dir: Path | None = None) -> Path:
    """The PR metadata file of a generated repository: beside it, never inside its tree."""
    repo_dir = Path(repo_dir) if repo_dir is not None else _default_repo_dir()
    return repo_dir.parent / PRS_FILE_NAME


def ensure_demo_repo() -> Path:
    """The demo repository in the project cache, built on first use (or when the generator changed)."""
    return generate_demo_repo(_default_repo_dir())


def _default_repo_dir() -> Path:
    return paths.cache_dir() / "sources" / "demo" / "repo"


def generate_demo_repo(dest: Path) -> Path:
    """Build the demo repository at `dest` and its `prs.jsonl` beside it; reuse both if already current.

    A repository whose marker (`.git/pbench-demo-version`) holds another fingerprint is removed and rebuilt.
    The new repository is built in a sibling temp directory and moved into place, under a lock, so that
    concurrent callers and interrupted builds never leave a half-built repository at `dest`.
    """
    dest = Path(dest).absolute()
    expected = fingerprint()
    if _is_current(dest, expected):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{dest.name}.lock"):
        if _is_current(dest, expected):
            return dest
        _check_replaceable(dest)
        build_dir = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
        try:
            work = build_dir / "repo"
            prs_text = _build(work, home=build_dir)
            (work / ".git" / MARKER_NAME).write_text(expected + "\n")
            _write_atomically(demo_prs_path(dest), prs_text)
            _remove(dest)
            work.rename(dest)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    return dest


def _is_current(dest: Path, expected: str) -> bool:
    marker = dest / ".git" / MARKER_NAME
    try:
        return marker.read_text().strip() == expected and demo_prs_path(dest).is_file()
    except OSError:
        return False


def _check_replaceable(dest: Path) -> None:
    """Only ever delete what this generator built (marker present) or an empty directory."""
    if not dest.exists() and not dest.is_symlink():
        return
    is_real_dir = dest.is_dir() and not dest.is_symlink()
    if is_real_dir and ((dest / ".git" / MARKER_NAME).is_file() or not any(dest.iterdir())):
        return
    raise InputError(
        f"{dest} exists and is not a generated demo repository (no .git/{MARKER_NAME}); "
        "refusing to replace it. Remove it or choose another destination."
    )


def _remove(dest: Path) -> None:
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        shutil.rmtree(dest)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(text.encode("utf-8"))
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _squash_message(pr: _PullRequest) -> str:
    """GitHub's default squash message: title (#N), then one bullet per branch commit."""
    bullets = "\n\n".join(f"* {c.message.strip().splitlines()[0]}" for c in pr.commits)
    return f"{pr.title} (#{pr.number})\n\n{bullets}"


def _merge_message(pr: _PullRequest) -> str:
    return f"Merge pull request #{pr.number} from demo/{pr.head_ref}\n\n{pr.title}"


def _build(work: Path, home: Path) -> str:
    """Create the repository in `work` and return the text of its prs.jsonl."""
    work.mkdir(parents=True)
    history = _history()
    github = history.people["github"]
    git = gitops.PinnedGit(work, home)
    git("init", "--quiet", "--template=", ".")
    initial, author = history.initial, history.initial_author
    tree = git.apply(initial.changes)
    main = git.commit(tree, [], initial.message, author, author, initial.date)
    merges: dict[int, tuple[str, str]] = {}  # PR number -> (first parent, merge or squash commit)
    for pr in history.pull_requests:
        if pr.squash:
            for commit in pr.commits:
                tree = git.apply(commit.changes)
            head = git.commit(tree, [main], _squash_message(pr), pr.author, github, pr.merged_at)
        else:
            tip = main
            for commit in pr.commits:
                tree = git.apply(commit.changes)
                committer = github if pr.author.is_bot else pr.author
                tip = git.commit(tree, [tip], commit.message, pr.author, committer, commit.date)
            # A `--no-ff` merge of a branch that starts at main's tip has the branch's tree.
            head = git.commit(tree, [main, tip], _merge_message(pr), pr.merged_by, github, pr.merged_at)
        merges[pr.number] = (main, head)
        main = head
    git("update-ref", "refs/heads/main", main)
    git("symbolic-ref", "HEAD", "refs/heads/main")
    git("reset", "--quiet", "--hard", "main")
    lines = [
        json.dumps(_pr_record(git, pr, *merges[pr.number], history.labels), sort_keys=True)
        for pr in history.pull_requests
    ]
    return "".join(line + "\n" for line in lines)


def _pr_record(
    git: gitops.PinnedGit, pr: _PullRequest, base: str, merge: str, labels: dict[str, dict]
) -> dict:
    """One line of prs.jsonl, shaped like `gh pr list --state merged --json ...` (plus two extensions)."""
    files = []
    for line in git("diff", "--numstat", "--no-renames", base, merge).splitlines():
        added, deleted, path = line.split("\t", 2)
        files.append({"additions": int(added), "deletions": int(deleted), "path": path})
    owner, name = REPO.split("/")
    record = {
        "additions": sum(f["additions"] for f in files),
        "author": pr.author.as_gh_author(),
        "baseRefName": "main",
        "body": pr.body,
        "changedFiles": len(files),
        "closingIssuesReferences": [
            {
                "body": issue.body,  # extension: gh does not export issue bodies
                "id": f"I_demoIssue{issue.number:04d}",
                "number": issue.number,
                "repository": {
                    "id": "R_demoFullstack",
                    "name": name,
                    "owner": {"id": "O_demoPrototypebench", "login": owner},
                },
                "url": f"{REPO_URL}/issues/{issue.number}",
            }
            for issue in pr.closes
        ],
        "createdAt": pr.created_at,
        "deletions": sum(f["deletions"] for f in files),
        "files": files,
        "headRefName": pr.head_ref,
        "labels": [{"name": label, **labels[label]} for label in pr.labels],
        "mergeCommit": {"oid": merge},
        "mergedAt": pr.merged_at,
        "number": pr.number,
        "repo": REPO,
        "reviewDecision": pr.review_decision,
        "state": "MERGED",
        "title": pr.title,
        "url": f"{REPO_URL}/pull/{pr.number}",
    }
    if pr.review_comments:
        # An extension the export reads, never as hints (review comments discuss the fix).
        record["reviewComments"] = list(pr.review_comments)
    return record
