"""Tests of the embedded demo source generator (tasks_lib/sources/demo_repo.py)."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tasks_lib.core.errors import InputError
from tasks_lib.sources import demo_repo

# The fields of `gh pr list --state merged --json number,title,body,author,labels,files,mergeCommit,...`.
GH_FIELDS = {
    "additions",
    "author",
    "baseRefName",
    "body",
    "changedFiles",
    "closingIssuesReferences",
    "createdAt",
    "deletions",
    "files",
    "headRefName",
    "labels",
    "mergeCommit",
    "mergedAt",
    "number",
    "repo",
    "reviewDecision",
    "state",
    "title",
    "url",
}
ISO_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, check=True, env=env, encoding="utf-8"
    )
    return proc.stdout.strip()


def git_ok(repo: Path, *args: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_repo.generate_demo_repo(tmp_path_factory.mktemp("demo") / "repo")


@pytest.fixture(scope="module")
def prs(repo: Path) -> list[dict]:
    return [json.loads(line) for line in demo_repo.demo_prs_path(repo).read_text().splitlines()]


def pr_of(prs: list[dict], kind: str) -> dict:
    number = demo_repo.DEMO_PRS[kind]
    return next(pr for pr in prs if pr["number"] == number)


def test_generation_is_deterministic_on_any_machine(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rule: the same generator version gives byte-identical SHAs and prs.jsonl, whatever the user's git
    config, identity variables or timezone (here: a hostile ~/.gitconfig, GIT_AUTHOR_*, TZ)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Intruder\n\temail = intruder@example.com\n"
        "[core]\n\tautocrlf = true\n[init]\n\tdefaultBranch = trunk\n[commit]\n\tgpgsign = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Intruder")
    monkeypatch.setenv("GIT_COMMITTER_DATE", "2001-01-01T00:00:00Z")
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))

    other = demo_repo.ensure_demo_repo()

    assert other == tmp_path / "cache" / "sources" / "demo" / "repo"
    assert demo_repo.demo_prs_path() == tmp_path / "cache" / "sources" / "demo" / "prs.jsonl"
    assert git(other, "rev-parse", "HEAD") == git(repo, "rev-parse", "HEAD")
    assert git(other, "rev-list", "--all") == git(repo, "rev-list", "--all")
    assert demo_repo.demo_prs_path(other).read_bytes() == demo_repo.demo_prs_path(repo).read_bytes()


def test_second_call_reuses_the_repository(repo: Path) -> None:
    """Rule: a repository whose marker holds the current fingerprint is reused untouched (and fast)."""
    marker = repo / ".git" / demo_repo.MARKER_NAME
    before = (marker.stat().st_mtime_ns, git(repo, "rev-parse", "HEAD"))
    prs_mtime = demo_repo.demo_prs_path(repo).stat().st_mtime_ns
    started = time.monotonic()
    assert demo_repo.generate_demo_repo(repo) == repo
    assert time.monotonic() - started < 0.5
    assert (marker.stat().st_mtime_ns, git(repo, "rev-parse", "HEAD")) == before
    assert demo_repo.demo_prs_path(repo).stat().st_mtime_ns == prs_mtime
    assert marker.read_text().strip() == demo_repo.fingerprint()


def test_stale_marker_means_rebuild(repo: Path, tmp_path: Path) -> None:
    """Rule: a repository whose marker does not hold the current fingerprint is removed and rebuilt."""
    dest = demo_repo.generate_demo_repo(tmp_path / "repo")
    (dest / ".git" / demo_repo.MARKER_NAME).write_text("0-old\n")
    (dest / "stray.txt").write_text("left over\n")
    assert demo_repo.generate_demo_repo(dest) == dest
    assert not (dest / "stray.txt").exists()
    assert (dest / ".git" / demo_repo.MARKER_NAME).read_text().strip() == demo_repo.fingerprint()
    assert git(dest, "rev-parse", "HEAD") == git(repo, "rev-parse", "HEAD")


def test_refuses_to_replace_a_foreign_directory(tmp_path: Path) -> None:
    """Rule: the generator only deletes what it built; any other non-empty directory is left alone."""
    dest = tmp_path / "mine"
    dest.mkdir()
    (dest / "precious.txt").write_text("keep me\n")
    with pytest.raises(InputError, match="not a generated demo repository"):
        demo_repo.generate_demo_repo(dest)
    assert (dest / "precious.txt").read_text() == "keep me\n"


def test_fingerprint_follows_the_generator_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rule: the fingerprint changes whenever GENERATOR_VERSION (or the module's source) changes."""
    current = demo_repo.fingerprint()
    monkeypatch.setattr(demo_repo, "GENERATOR_VERSION", demo_repo.GENERATOR_VERSION + ".test")
    assert demo_repo.fingerprint() != current


def test_repository_is_a_clean_checkout_of_main(repo: Path) -> None:
    """Rule: a non-bare repository on `main`, clean work tree, no leftover branches; the initial commit
    holds the backend (servable with uvicorn) and the frontend (Vite + React, Playwright tests)."""
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert not (repo / demo_repo.PRS_FILE_NAME).exists()  # prs.jsonl lives beside the repo
    root = git(repo, "rev-list", "--max-parents=0", "HEAD")
    assert git(repo, "log", "-1", "--format=%s", root) == "Initial app"
    for path in (
        "README.md",
        "backend/requirements.txt",
        "backend/app/prestart.py",
        "backend/tests/conftest.py",
        "frontend/package.json",
        "frontend/package-lock.json",
        "frontend/vite.config.js",
        "frontend/playwright.config.js",
        "frontend/index.html",
        "frontend/src/App.jsx",
        "frontend/tests/items.spec.js",
    ):
        assert git_ok(repo, "cat-file", "-e", f"{root}:{path}"), path
    assert "uvicorn==" in git(repo, "show", f"{root}:backend/requirements.txt")
    assert "'/api'" in git(repo, "show", f"{root}:frontend/vite.config.js")  # proxied: no CORS needed
    config = git(repo, "show", f"{root}:frontend/playwright.config.js")
    assert "testDir: './tests'" in config and "baseURL: 'http://localhost:5173'" in config
    initial_spec = git(repo, "show", f"{root}:frontend/tests/items.spec.js")
    assert len(re.findall(r"^  test\(", initial_spec, re.MULTILINE)) == 2


def test_frontend_lock_matches_the_manifest(repo: Path) -> None:
    """Rule: frontend/package-lock.json is the embedded data file, and it locks exactly the manifest's
    dependencies (what `npm ci` checks) under the manifest's name."""
    root = git(repo, "rev-list", "--max-parents=0", "HEAD")
    data_file = demo_repo.data_dir() / "commits" / "initial" / "frontend" / "package-lock.json"
    lock_text = git(repo, "show", f"{root}:frontend/package-lock.json")
    assert lock_text == data_file.read_text(encoding="utf-8").strip()
    lock = json.loads(lock_text)
    manifest = json.loads(git(repo, "show", f"{root}:frontend/package.json"))
    top = lock["packages"][""]
    assert lock["name"] == top["name"] == manifest["name"]
    assert top["dependencies"] == manifest["dependencies"]
    assert top["devDependencies"] == manifest["devDependencies"]
    for name, version in {**manifest["dependencies"], **manifest["devDependencies"]}.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
    assert "resolved" not in lock_text  # no registry host: npm ci resolves from the configured registry


def test_every_pr_is_merged_on_main_as_recorded(repo: Path, prs: list[dict]) -> None:
    """Rule: every mergeCommit exists on main's first-parent history; merge commits have 2 parents and
    squash commits 1 (subject ending "(#N)"); `files` and the totals equal git's diff against the first
    parent; branch commits come after the previous main commit."""
    first_parent = git(repo, "rev-list", "--first-parent", "main").splitlines()
    for pr in prs:
        oid, n = pr["mergeCommit"]["oid"], pr["number"]
        assert oid in first_parent, n
        parents = git(repo, "rev-list", "--parents", "-n", "1", oid).split()[1:]
        subject = git(repo, "log", "-1", "--format=%s", oid)
        if len(parents) == 2:
            assert subject == f"Merge pull request #{n} from demo/{pr['headRefName']}"
            base_time = int(git(repo, "log", "-1", "--format=%ct", parents[0]))
            for branch_commit in git(repo, "rev-list", f"{parents[0]}..{parents[1]}").splitlines():
                assert int(git(repo, "log", "-1", "--format=%ct", branch_commit)) > base_time
        else:
            assert len(parents) == 1, n
            assert subject == f"{pr['title']} (#{n})"
        base = parents[0]
        names = git(repo, "diff", "--name-only", "--no-renames", base, oid).splitlines()
        assert [f["path"] for f in pr["files"]] == names
        numstat = [line.split("\t") for line in git(repo, "diff", "--numstat", base, oid).splitlines()]
        assert [(f["additions"], f["deletions"]) for f in pr["files"]] == [
            (int(a), int(d)) for a, d, _ in numstat
        ]
        assert pr["changedFiles"] == len(names)
        assert pr["additions"] == sum(f["additions"] for f in pr["files"])
        assert pr["deletions"] == sum(f["deletions"] for f in pr["files"])
    kinds = {
        pr["number"]: len(git(repo, "rev-list", "--parents", "-n", "1", pr["mergeCommit"]["oid"]).split()) - 1
        for pr in prs
    }
    merged = ("feature", "collection_error", "bot_bump", "fullstack")
    squashed = ("bugfix", "docs", "flaky", "frontend_only")
    assert [kinds[demo_repo.DEMO_PRS[k]] for k in merged] == [2, 2, 2, 2]
    assert [kinds[demo_repo.DEMO_PRS[k]] for k in squashed] == [1, 1, 1, 1]


def test_pr_records_have_the_gh_export_shape(prs: list[dict]) -> None:
    """Rule: prs.jsonl lines look like `gh pr list --json ...` (plus the `reviewComments` extension on
    one PR), sorted by number, with increasing ISO 8601 dates in 2025-02..2025-09."""
    numbers = [pr["number"] for pr in prs]
    assert numbers == sorted(demo_repo.DEMO_PRS.values())
    assert list(demo_repo.DEMO_PRS) == [
        "feature",
        "bugfix",
        "collection_error",
        "docs",
        "bot_bump",
        "flaky",
        "frontend_only",
        "fullstack",
    ]
    previous_merge = ""
    for pr in prs:
        assert set(pr) - {"reviewComments"} == GH_FIELDS
        assert pr["state"] == "MERGED" and pr["baseRefName"] == "main"
        assert pr["repo"] == "prototypebench/demo-fullstack"
        assert pr["url"] == f"https://github.com/prototypebench/demo-fullstack/pull/{pr['number']}"
        assert re.fullmatch(r"[0-9a-f]{40}", pr["mergeCommit"]["oid"])
        assert ISO_Z.match(pr["createdAt"]) and ISO_Z.match(pr["mergedAt"])
        assert "2025-02" <= pr["createdAt"] < pr["mergedAt"] < "2025-10"
        assert pr["mergedAt"] > previous_merge
        previous_merge = pr["mergedAt"]
        assert pr["title"] and pr["body"] and pr["headRefName"] and pr["labels"]
        assert {"name", "color", "description", "id"} <= set(pr["labels"][0])
        for issue in pr["closingIssuesReferences"]:
            assert issue["body"] and issue["number"] < pr["number"]
            assert (
                issue["url"] == f"https://github.com/prototypebench/demo-fullstack/issues/{issue['number']}"
            )
            assert issue["repository"]["name"] == "demo-fullstack"
            assert issue["repository"]["owner"]["login"] == "prototypebench"
    assert sum("reviewComments" in pr for pr in prs) == 1
    assert pr_of(prs, "feature")["closingIssuesReferences"]
    assert pr_of(prs, "fullstack")["closingIssuesReferences"]
    assert [label["name"] for label in pr_of(prs, "bugfix")["labels"]] == ["bug"]


def test_collection_error_pr_changes_the_lock_file(repo: Path, prs: list[dict]) -> None:
    """Rule: the collection-error PR changes backend/requirements.txt and adds a test file that imports a
    module absent at its base (so collecting it at base fails with an ImportError)."""
    pr = pr_of(prs, "collection_error")
    paths = {f["path"] for f in pr["files"]}
    assert {"backend/requirements.txt", "backend/app/slugs.py", "backend/tests/test_slugs.py"} <= paths
    oid = pr["mergeCommit"]["oid"]
    assert "python-slugify==8.0.4" in git(repo, "show", f"{oid}:backend/requirements.txt")
    assert "from app.slugs import slugify_title" in git(repo, "show", f"{oid}:backend/tests/test_slugs.py")
    assert not git_ok(repo, "cat-file", "-e", f"{oid}^1:backend/app/slugs.py")


def test_docs_pr_touches_no_backend_file(prs: list[dict]) -> None:
    """Rule: the docs-only PR changes README.md and docs/usage.md, nothing under backend/."""
    pr = pr_of(prs, "docs")
    assert pr["title"].startswith("📝 ")
    assert {f["path"] for f in pr["files"]} == {"README.md", "docs/usage.md"}


def test_bot_pr_is_authored_by_dependabot(repo: Path, prs: list[dict]) -> None:
    """Rule: the bump PR is a bot's (author is_bot, label dependencies) and only changes a pin."""
    pr = pr_of(prs, "bot_bump")
    assert pr["author"] == {"is_bot": True, "login": "app/dependabot"}
    assert [label["name"] for label in pr["labels"]] == ["dependencies"]
    assert pr["title"] == "⬆ Bump pytest from 8.3.4 to 8.3.5"
    assert [f["path"] for f in pr["files"]] == ["backend/requirements.txt"]
    assert (pr["additions"], pr["deletions"]) == (1, 1)
    branch_tip = git(repo, "rev-parse", f"{pr['mergeCommit']['oid']}^2")
    assert git(repo, "log", "-1", "--format=%an <%ae>", branch_tip) == (
        "dependabot[bot] <49699333+dependabot[bot]@users.noreply.github.com>"
    )


def test_flaky_test_is_added_by_the_flaky_pr(repo: Path, prs: list[dict]) -> None:
    """Rule: FLAKY_TEST_ID names a test added by the flaky PR, in four parametrized copies (FLAKY_TEST_IDS) that
    draw with SystemRandom among four outcomes, none of them a pass; FLAKY_MISS_BOUND is below one in a
    million (the docstring's (1/64)**4)."""
    pr = pr_of(prs, "flaky")
    path, name = demo_repo.FLAKY_TEST_ID.split("::")
    oid = pr["mergeCommit"]["oid"]
    head_text = git(repo, "show", f"{oid}:backend/{path}")
    assert f"def {name}(" in head_text
    assert "random.SystemRandom()" in head_text
    assert '_FLAKY_OUTCOMES = ("fail", "skip", "xfail", "error")' in head_text
    assert '@pytest.mark.parametrize("copy", [1, 2, 3, 4])' in head_text
    assert tuple(f"{demo_repo.FLAKY_TEST_ID}[{i}]" for i in (1, 2, 3, 4)) == demo_repo.FLAKY_TEST_IDS
    assert demo_repo.FLAKY_MISS_BOUND == 2**-24 < 1e-6
    assert f"def {name}(" not in git(repo, "show", f"{oid}^1:backend/{path}")
    assert f"backend/{path}" in {f["path"] for f in pr["files"]}


def test_the_flaky_bound_is_what_the_detector_misses() -> None:
    """Rule: the docstring's bound is the detector's: over every outcome sequence of one copy (4**3 head x
    4**2 base, equally likely), `grading.extract_labels` reports it flaky in all but 4 * 4 = 16 of 1024, and
    never lists it (1/64 missed, so 2**-24 for four independent copies)."""
    import itertools

    from tasks_lib.engine import grading

    outcomes = ("failed", "skipped", "xfailed", "error")
    missed = 0
    for head in itertools.product(outcomes, repeat=3):
        for base in itertools.product(outcomes, repeat=2):
            labels = grading.extract_labels([{"t": o} for o in base], [{"t": o} for o in head])
            assert labels.fail_to_pass == [] and labels.pass_to_pass == []
            missed += labels.flaky == []
    assert missed / 4**5 == 1 / 64
    assert (missed / 4**5) ** len(demo_repo.FLAKY_TEST_IDS) == demo_repo.FLAKY_MISS_BOUND


def test_frontend_only_pr_touches_only_the_frontend(repo: Path, prs: list[dict]) -> None:
    """Rule: the frontend-only PR (after the flaky one) changes the React app and adds Playwright tests to
    frontend/tests/items.spec.js, nothing outside frontend/; FRONTEND_FAIL_TO_PASS names its new tests."""
    pr = pr_of(prs, "frontend_only")
    assert pr["number"] > demo_repo.DEMO_PRS["flaky"] and pr["mergedAt"] > pr_of(prs, "flaky")["mergedAt"]
    assert pr["title"].startswith("✨ ") and [label["name"] for label in pr["labels"]] == ["feature"]
    assert [f["path"] for f in pr["files"]] == ["frontend/src/App.jsx", "frontend/tests/items.spec.js"]
    oid = pr["mergeCommit"]["oid"]
    assert "No items yet" in git(repo, "show", f"{oid}:frontend/src/App.jsx")
    assert "No items yet" not in git(repo, "show", f"{oid}^1:frontend/src/App.jsx")
    assert _spec_ids(git(repo, "show", f"{oid}:frontend/tests/items.spec.js")) - _spec_ids(
        git(repo, "show", f"{oid}^1:frontend/tests/items.spec.js")
    ) == set(demo_repo.FRONTEND_FAIL_TO_PASS["frontend_only"])


def test_fullstack_pr_changes_both_sides_with_tests_on_both(repo: Path, prs: list[dict]) -> None:
    """Rule: the fullstack PR (a merge commit, closing an issue) adds DELETE /api/v1/items/{id} with pytest
    tests and a Delete button with a Playwright test: app code and tests on both sides."""
    pr = pr_of(prs, "fullstack")
    assert pr["number"] > demo_repo.DEMO_PRS["frontend_only"]
    assert pr["title"].startswith("✨ ") and [label["name"] for label in pr["labels"]] == ["feature"]
    assert (
        "Closes #15." in pr["body"]
        and "DELETE /api/v1/items/{id}" in pr["closingIssuesReferences"][0]["body"]
    )
    assert {f["path"] for f in pr["files"]} == {
        "backend/app/crud.py",
        "backend/app/main.py",
        "backend/tests/test_items.py",
        "frontend/src/App.jsx",
        "frontend/src/api.js",
        "frontend/tests/items.spec.js",
    }
    oid = pr["mergeCommit"]["oid"]
    assert '@router.delete("/{item_id}"' in git(repo, "show", f"{oid}:backend/app/main.py")
    assert "router.delete" not in git(repo, "show", f"{oid}^1:backend/app/main.py")
    backend_tests = git(repo, "show", f"{oid}:backend/tests/test_items.py")
    for name in ("test_delete_item", "test_deleted_item_leaves_the_list", "test_delete_missing_item"):
        assert f"def {name}(" in backend_tests
        assert f"def {name}(" not in git(repo, "show", f"{oid}^1:backend/tests/test_items.py")
    assert _spec_ids(git(repo, "show", f"{oid}:frontend/tests/items.spec.js")) - _spec_ids(
        git(repo, "show", f"{oid}^1:frontend/tests/items.spec.js")
    ) == set(demo_repo.FRONTEND_FAIL_TO_PASS["fullstack"])


def _spec_ids(spec: str) -> set[str]:
    """The ids Playwright's list reporter prints for items.spec.js, re-derived here independently."""
    ids = set()
    for number, line in enumerate(spec.splitlines(), start=1):
        match = re.match(r"^( *)test\('([^']+)'", line)
        if match:
            ids.add(f"tests/items.spec.js:{number}:{len(match.group(1)) + 1} › Items › {match.group(2)}")
    return ids


def test_frontend_fail_to_pass_ids_are_the_ones_playwright_printed() -> None:
    """Rule: the ids are those of Playwright's own `--list` of the fullstack head (Playwright 1.65, run in
    the frontend image), in PrototypeBench's form (frontend-relative path, no project)."""
    assert demo_repo.FRONTEND_FAIL_TO_PASS == {
        "frontend_only": (
            "tests/items.spec.js:25:3 › Items › shows an empty state when there are no items",
            "tests/items.spec.js:33:3 › Items › shows how many items there are",
        ),
        "fullstack": ("tests/items.spec.js:44:3 › Items › deleting an item removes it from the list",),
    }


def test_new_prs_split_by_side_with_the_demo_rules_plus_a_frontend(repo: Path, prs: list[dict]) -> None:
    """Rule: with the demo source's test patterns and a `frontend` dir, the frontend-only PR is
    frontend_only and the fullstack PR fullstack; their test patches hold only test files, per side."""
    from tasks_lib.formats.patches import split_patch
    from tasks_lib.sources import gitops
    from tasks_lib.sources.record import load_source, parse_source

    raw = copy.deepcopy(load_source("demo").raw)
    raw["frontend"] = {
        "dir": "frontend",
        "node_version": "20",
        "package_manager": "npm",
        "lock_files": ["frontend/package-lock.json"],
        "serve_command": "npx --no-install vite --host 127.0.0.1 --port 5173 --strictPort",
    }
    source = parse_source(raw, Path("demo.toml"))
    expected = {
        "frontend_only": ("frontend_only", "", "frontend/tests/items.spec.js"),
        "fullstack": ("fullstack", "backend/tests/test_items.py", "frontend/tests/items.spec.js"),
    }
    for kind, (domain, backend_test, frontend_test) in expected.items():
        pr = pr_of(prs, kind)
        code = [f["path"] for f in pr["files"] if not source.is_test_file(f["path"])]
        assert str(source.stack_domain(code)) == domain, kind
        oid = pr["mergeCommit"]["oid"]
        split = split_patch(gitops.diff(repo / ".git", f"{oid}^1", oid), source)
        assert (f"b/{backend_test}" in split.test_patch_backend) == bool(backend_test), kind
        assert f"b/{frontend_test}" in split.test_patch_frontend, kind
        assert "tests/" not in split.patch, kind
