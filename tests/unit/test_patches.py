"""Invariants of diff handling: splits that git still applies, paths read as `git apply` reads
them, and untrusted patches refused with a named reason."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from tasks_lib.core.constants import Status
from tasks_lib.formats.patches import (
    PatchFormatError,
    PatchProblem,
    PatchSplit,
    changed_paths,
    file_diffs,
    files_to_diff,
    lock_files_touched,
    problems_status,
    split_patch,
    validate_patch,
)
from tasks_lib.sources.record import load_source, parse_source

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
GIT += ["-c", "core.autocrlf=false", "-c", "core.quotepath=true"]


def git(repo: Path, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GIT, *args], cwd=repo, input=input, text=True, capture_output=True, check=check, encoding="utf-8"
    )


def write(repo: Path, path: str, content: str | bytes) -> None:
    target = repo / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_bytes(content.encode())


def make_repo(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for path, content in files.items():
        write(repo, path, content)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def apply_check(repo: Path, diff: str) -> subprocess.CompletedProcess:
    return git(repo, "apply", "--check", "-", input=diff, check=False)


@pytest.fixture(scope="module")
def demo():
    """The demo source's rules plus a frontend, so both sides of the stack are exercised."""
    raw = copy.deepcopy(load_source("demo").raw)
    raw["frontend"] = {
        "dir": "frontend",
        "node_version": "20",
        "package_manager": "npm",
        "lock_files": ["frontend/package-lock.json"],
        "serve_command": "npm run dev",
    }
    return parse_source(raw, Path("demo.toml"))


BASE_FILES: dict[str, str | bytes] = {
    "backend/app/main.py": "def f():\n    return 1\n",
    "backend/app/old_name.py": "x = 1\ny = 2\nz = 3\n",
    "backend/app/gone.py": "bye = True\n",
    "backend/scripts/run.sh": "#!/bin/sh\necho hi\n",
    "backend/tests/test_main.py": "def test_f():\n    assert True\n",
    "backend/pytest.ini": "[pytest]\n",
    "conftest.py": "import pytest\n",
    "frontend/src/App.tsx": "export const App = () => null\n",
    "frontend/tests/app.spec.ts": "test('a', () => {})\n",
    "frontend/public/logo.bin": b"\x00\x01\x02old",
    "README.md": "demo\n",
}


@pytest.fixture()
def pr_repo(tmp_path):
    """A base commit and a PR diff touching code, tests, infra, a rename, a mode change and a binary."""
    repo = make_repo(tmp_path, BASE_FILES)
    write(repo, "backend/app/main.py", "def f():\n    return 2\n")
    git(repo, "mv", "backend/app/old_name.py", "backend/app/new_name.py")
    git(repo, "rm", "-q", "backend/app/gone.py")
    (repo / "backend/scripts/run.sh").chmod(0o755)
    write(repo, "backend/tests/test_main.py", "def test_f():\n    assert True\n\n\ndef test_g():\n    pass\n")
    write(repo, "backend/tests/test_new.py", "def test_new():\n    pass\n")
    write(repo, "backend/pytest.ini", "[pytest]\naddopts = -q\n")
    write(repo, "conftest.py", "import pytest\n\nX = 1\n")
    write(repo, "frontend/src/App.tsx", "export const App = () => 'hi'\n")
    write(repo, "frontend/tests/app.spec.ts", "test('a', () => {})\ntest('b', () => {})\n")
    write(repo, "frontend/public/logo.bin", b"\x00\x01\x02new")
    write(repo, "docs/my notes.md", "with a space\n")
    git(repo, "add", "-A")
    diff = git(repo, "diff", "--cached", "--binary", "-M", "HEAD").stdout
    git(repo, "reset", "-q", "--hard", "HEAD")
    return repo, diff


# --- reading diffs ---------------------------------------------------------------------------


def test_changed_paths_count_both_sides_of_a_rename_and_never_dev_null(pr_repo):
    """Rule: a rename changes two paths; a created or deleted file's /dev/null side is no path."""
    _, diff = pr_repo
    paths = changed_paths(diff)
    assert "backend/app/old_name.py" in paths and "backend/app/new_name.py" in paths
    assert "backend/app/gone.py" in paths and "backend/tests/test_new.py" in paths
    assert "docs/my notes.md" in paths
    assert "/dev/null" not in paths and "dev/null" not in paths
    assert len(paths) == len(set(paths))


def test_blocks_keep_every_byte_of_the_original_diff(pr_repo):
    """Rule: cutting a diff into file blocks loses nothing (modes, index lines, binary data)."""
    _, diff = pr_repo
    assert "".join(fd.text for fd in file_diffs(diff)) == diff


def test_quoted_non_ascii_paths_are_unquoted_like_git_apply_reads_them(tmp_path):
    """Rule: git C-quotes non-ASCII names; the path we check is the one git writes."""
    repo = make_repo(tmp_path, {"ü dir/naïve.py": "a\n"})
    write(repo, "ü dir/naïve.py", "b\n")
    diff = git(repo, "diff").stdout
    assert '"a/\\303\\274 dir/na\\303\\257ve.py"' in diff
    assert changed_paths(diff) == ["ü dir/naïve.py"]


def test_a_removed_line_that_looks_like_a_file_header_stays_in_its_hunk(tmp_path):
    """Rule: hunk line counts decide where a file ends; '--- x'/'+++ y' content is not a header."""
    repo = make_repo(tmp_path, {"q.sql": "select 1;\n-- a\nselect 2;\n"})
    write(repo, "q.sql", "select 1;\n++ b\nselect 2;\n")
    diff = git(repo, "diff").stdout
    assert "\n--- a\n+++ b\n" in diff
    assert changed_paths(diff) == ["q.sql"]
    assert len(file_diffs(diff)) == 1


def test_a_truncated_hunk_is_a_format_error():
    """Rule: a diff that ends inside a hunk is refused, not silently shortened."""
    diff = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n"
    with pytest.raises(PatchFormatError, match="ends inside a hunk"):
        file_diffs(diff)


def test_plain_unified_diffs_without_git_headers_are_read():
    """Rule: `diff -u` output (no `diff --git` line) is a diff too; each `---`/`+++` pair is a file."""
    diff = (
        "--- a/one.py\t2024-01-01 00:00:00\n+++ b/one.py\t2024-01-02 00:00:00\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/two.py\n+++ b/two.py\n@@ -1 +1 @@\n-c\n+d\n"
    )
    assert changed_paths(diff) == ["one.py", "two.py"]


def test_mail_preamble_is_not_part_of_any_file():
    """Rule: text before the first file header (format-patch mail, commit message) is dropped."""
    diff = "From abc Mon Sep 17 00:00:00 2001\nSubject: x\n\n---\n a | 1 +\n\ndiff --git a/a b/a\n"
    diff += "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"
    (block,) = file_diffs(diff)
    assert block.text.startswith("diff --git a/a b/a\n")


# --- splitting -------------------------------------------------------------------------------


def test_split_sends_test_files_and_infra_to_test_patch_and_the_rest_to_patch(pr_repo, demo):
    """Rule: `patch` holds no test file or test infrastructure; `test_patch` holds nothing else."""
    _, diff = pr_repo
    split = split_patch(diff, demo)
    code, tests = changed_paths(split.patch), changed_paths(split.test_patch)
    assert not any(demo.is_test_file(p) for p in code)
    assert all(demo.is_test_file(p) for p in tests)
    assert set(code) | set(tests) == set(changed_paths(diff))
    assert {"backend/pytest.ini", "conftest.py", "frontend/tests/app.spec.ts"} <= set(tests)


def test_split_by_side_puts_root_test_files_with_the_backend(pr_repo, demo):
    """Rule: test_patch = backend + frontend, by the source's dirs; a root conftest is backend."""
    _, diff = pr_repo
    split = split_patch(diff, demo)
    backend, frontend = changed_paths(split.test_patch_backend), changed_paths(split.test_patch_frontend)
    assert "conftest.py" in backend and "backend/tests/test_new.py" in backend
    assert frontend == ["frontend/tests/app.spec.ts"]
    blocks = sorted(fd.text for fd in file_diffs(split.test_patch))
    by_side = file_diffs(split.test_patch_backend) + file_diffs(split.test_patch_frontend)
    assert blocks == sorted(fd.text for fd in by_side)


def test_split_keeps_header_lines_byte_for_byte(pr_repo, demo):
    """Rule: splitting never re-renders a block: mode, rename, index and binary lines survive."""
    _, diff = pr_repo
    split = split_patch(diff, demo)
    original = {fd.text for fd in file_diffs(diff)}
    for part in (split.patch, split.test_patch):
        assert {fd.text for fd in file_diffs(part)} <= original
    assert "old mode 100644\nnew mode 100755\n" in split.patch
    assert "rename from backend/app/old_name.py\n" in split.patch
    assert "GIT binary patch" in split.patch


def test_split_parts_apply_with_git_alone_and_together(pr_repo, demo):
    """Rule: every part of a split is a diff `git apply` accepts on the base, and so is their union."""
    repo, diff = pr_repo
    split = split_patch(diff, demo)
    for part in (split.patch, split.test_patch, split.test_patch_backend, split.test_patch_frontend):
        result = apply_check(repo, part)
        assert result.returncode == 0, result.stderr
    git(repo, "apply", "-", input=split.patch)
    result = apply_check(repo, split.test_patch)
    assert result.returncode == 0, result.stderr
    git(repo, "apply", "-", input=split.test_patch)
    assert git(repo, "status", "--porcelain").stdout  # something changed
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--binary", "-M", "HEAD").stdout == diff


def test_patch_split_refuses_non_text():
    """Rule: a split record only ever holds text."""
    with pytest.raises(TypeError):
        PatchSplit("", None, "", "")  # type: ignore[arg-type]


def test_lock_files_touched_matches_paths_and_globs():
    """Rule: a lock file change is noticed by exact path or glob, and only changed files count."""
    diff = (
        "diff --git a/backend/uv.lock b/backend/uv.lock\n--- a/backend/uv.lock\n+++ b/backend/uv.lock\n"
        "@@ -1 +1 @@\n-a\n+b\n"
        "diff --git a/frontend/bun.lock b/frontend/bun.lock\n--- a/frontend/bun.lock\n+++ b/frontend/bun.lock\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    assert lock_files_touched(diff, ["backend/uv.lock", "backend/requirements.txt"]) == ["backend/uv.lock"]
    assert lock_files_touched(diff, ["**/*.lock"]) == ["backend/uv.lock", "frontend/bun.lock"]
    assert lock_files_touched(diff, []) == []


# --- files -> diff ---------------------------------------------------------------------------


def reader(repo: Path):
    def read(path: str) -> str | None:
        target = repo / path
        return target.read_bytes().decode() if target.is_file() else None

    return read


def test_files_to_diff_produces_a_diff_git_applies_to_the_exact_contents(tmp_path):
    """Rule: a `files` prediction becomes a diff that git applies and that yields exactly those files."""
    repo = make_repo(
        tmp_path,
        {
            "a.py": "one\ntwo\nthree\n",
            "no_eol.txt": "x\ny",
            "crlf.txt": "a\r\nb\r\n",
            "gone.py": "bye\n",
            "empty_gone.txt": "",
            "same.py": "same\n",
            "dir with space/f.py": "old\n",
        },
    )
    files = {
        "a.py": "one\n2\nthree\nfour",
        "no_eol.txt": "x\ny\nz\n",
        "crlf.txt": "a\r\nB\r\n",
        "gone.py": None,
        "empty_gone.txt": None,
        "same.py": "same\n",
        "new/ü.py": "print('hi')\n",
        "new/empty.txt": "",
        "dir with space/f.py": "new\n",
    }
    diff = files_to_diff(files, reader(repo))
    assert "same.py" not in changed_paths(diff)
    assert validate_patch(diff) == []
    result = apply_check(repo, diff)
    assert result.returncode == 0, result.stderr + diff
    git(repo, "apply", "-", input=diff)
    for path, content in files.items():
        if content is None:
            assert not (repo / path).exists()
        else:
            assert (repo / path).read_bytes() == content.encode(), path


def test_files_to_diff_of_unchanged_files_is_empty(tmp_path):
    """Rule: resubmitting the base content is the empty patch."""
    repo = make_repo(tmp_path, {"a.py": "x\n"})
    assert files_to_diff({"a.py": "x\n"}, reader(repo)) == ""


def test_deleting_a_missing_file_yields_a_diff_that_does_not_apply(tmp_path):
    """Rule: a bad `files` entry is a per-instance apply failure, never a crash or a silent no-op."""
    repo = make_repo(tmp_path, {"a.py": "x\n"})
    diff = files_to_diff({"nope.py": None}, reader(repo))
    assert changed_paths(diff) == ["nope.py"]
    assert apply_check(repo, diff).returncode != 0


def test_files_to_diff_never_reads_unsafe_paths():
    """Rule: the base reader is never asked for a path outside the repository; validation refuses it."""
    asked = []

    def read(path):
        asked.append(path)
        return None

    diff = files_to_diff(
        {"../../etc/passwd": "x\n", "/abs.py": "y\n", ".git/config": "z\n", "ok.py": "w\n"}, read
    )
    assert asked == ["ok.py"]
    assert problems_status(validate_patch(diff)) == Status.PATCH_INVALID


# --- validation ------------------------------------------------------------------------------

GOOD = "diff --git a/backend/app/x.py b/backend/app/x.py\n--- a/backend/app/x.py\n+++ b/backend/app/x.py\n"
GOOD += "@@ -1 +1 @@\n-a\n+b\n"


def one_file(path: str, *, old: str | None = None, header: str = "") -> str:
    old = old or path
    return f"diff --git a/{old} b/{path}\n{header}--- a/{old}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"


def only(problems: list[PatchProblem], status: Status) -> list[str]:
    return [p.message for p in problems if p.status == status]


def test_empty_string_is_the_valid_empty_patch(demo):
    """Rule: "" is the `empty` prediction: valid, changes nothing."""
    assert validate_patch("", demo) == []


def test_a_clean_patch_has_no_problems(demo):
    """Rule: an ordinary source change passes every check."""
    assert validate_patch(GOOD, demo) == []


@pytest.mark.parametrize(
    ("diff", "needle"),
    [
        ("   \n\t\n", "whitespace"),
        ("I fixed the bug by editing main.py", "no 'diff --git'"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n a\n", "ends inside a hunk"),
        ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ garbage @@\n", "malformed hunk header"),
        ("diff --git a/x b/x\n@@ -1 +1 @@\n-a\n+b\n", "without a ---/+++"),
    ],
)
def test_unparsable_patches_are_invalid(diff, needle, demo):
    """Rule: text that is not a unified diff is `patch_invalid`, with a message saying why."""
    problems = validate_patch(diff, demo)
    assert problems_status(problems) == Status.PATCH_INVALID
    assert any(needle in m for m in only(problems, Status.PATCH_INVALID)), problems


def test_binary_hunks_are_invalid(pr_repo, demo):
    """Rule: binary patches (`GIT binary patch` and `Binary files … differ`) are refused, naming the file."""
    _, diff = pr_repo
    messages = only(validate_patch(split_patch(diff, demo).patch, demo), Status.PATCH_INVALID)
    assert any("frontend/public/logo.bin" in m and "binary" in m for m in messages)
    plain = "diff --git a/img.png b/img.png\nindex 1111111..2222222 100644\n"
    plain += "Binary files a/img.png and b/img.png differ\n"
    assert any(
        "img.png" in m and "binary" in m for m in only(validate_patch(plain, demo), Status.PATCH_INVALID)
    )


@pytest.mark.parametrize(
    ("diff", "path", "needle"),
    [
        ("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "/etc/passwd", "absolute path"),
        (one_file("backend/../../outside.py"), "backend/../../outside.py", "'..' path segment"),
        (one_file("backend/../../outside.py"), "backend/../../outside.py", "escapes the repository"),
        (one_file("a/../b.py"), "a/../b.py", "'..' path segment"),
        (one_file(".git/hooks/pre-commit"), ".git/hooks/pre-commit", ".git/"),
        (one_file("sub/.GIT/config"), "sub/.GIT/config", ".git/"),
        (
            one_file("backend/new.py", old="backend/../x.py", header="rename from backend/../x.py\n"),
            "backend/../x.py",
            "'..'",
        ),
    ],
)
def test_unsafe_paths_are_invalid_and_named(diff, path, needle, demo):
    """Rule: a patch may only write plain paths inside the repository; the message names the path."""
    messages = only(validate_patch(diff, demo), Status.PATCH_INVALID)
    assert any(path in m and needle in m for m in messages), messages


def test_symlinks_are_invalid(demo):
    """Rule: a patch may not create or turn a file into a symlink (mode 120000)."""
    new_link = (
        "diff --git a/lnk b/lnk\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n+++ b/lnk\n"
    )
    new_link += "@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    mode_change = "diff --git a/backend/app/x.py b/backend/app/x.py\nold mode 100644\nnew mode 120000\n"
    for diff in (new_link, mode_change):
        messages = only(validate_patch(diff, demo), Status.PATCH_INVALID)
        assert any("symlink" in m for m in messages), diff


@pytest.mark.parametrize(
    "path",
    [
        "backend/tests/test_x.py",
        "backend/tests/utils/helpers.py",
        "conftest.py",
        "backend/app/conftest.py",
        "backend/pytest.ini",
        "frontend/playwright.config.ts",
        "frontend/tests/items.spec.ts",
    ],
)
def test_patches_that_touch_tests_or_test_infra_are_flagged(path, demo):
    """Rule: editing tests, conftest or runner config is `patch_touches_tests`, naming the path."""
    problems = validate_patch(one_file(path), demo)
    assert problems_status(problems) == Status.PATCH_TOUCHES_TESTS
    assert all(path in m for m in only(problems, Status.PATCH_TOUCHES_TESTS))


def test_renaming_a_test_file_away_touches_tests(demo):
    """Rule: both sides of a rename count; moving a test file out of the tests dir is touching it."""
    diff = "diff --git a/backend/tests/test_a.py b/backend/app/a.py\nsimilarity index 100%\n"
    diff += "rename from backend/tests/test_a.py\nrename to backend/app/a.py\n"
    assert problems_status(validate_patch(diff, demo)) == Status.PATCH_TOUCHES_TESTS


def test_invalid_wins_over_touches_tests(demo):
    """Rule: when both apply, the verdict is `patch_invalid` (it would not even be applied)."""
    problems = validate_patch(one_file("backend/tests/../../../x.py") + one_file("backend/tests/t.py"), demo)
    assert {p.status for p in problems} == {Status.PATCH_INVALID, Status.PATCH_TOUCHES_TESTS}
    assert problems_status(problems) == Status.PATCH_INVALID
    assert problems_status([]) is None


def test_patch_problem_refuses_other_statuses():
    """Rule: a patch problem can only be `patch_invalid` or `patch_touches_tests`."""
    with pytest.raises(ValueError):
        PatchProblem(Status.TESTS_FAILED, "nope")
    with pytest.raises(ValueError):
        PatchProblem(Status.PATCH_INVALID, "")


def test_split_of_the_published_pr_reproduces_its_patch_and_test_patch(demo):
    """Rule: packaging the published instance's PR diff gives back its `patch` and `test_patch` byte-for-byte."""
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "instance-1396.jsonl"
    inst = json.loads(fixture.read_text())
    split = split_patch(inst["patch"] + inst["test_patch"], demo)
    assert split.patch == inst["patch"]
    assert split.test_patch == inst["test_patch"] == split.test_patch_backend
    assert split.test_patch_frontend == inst["test_patch_frontend"] == ""


@pytest.mark.parametrize(
    "path",
    [
        "backend/app/conftest.py",
        "pytest.ini",
        "backend/.pytest.ini",
        "backend/pytest.toml",
        "tox.ini",
        "backend/sitecustomize.py",
        "usercustomize.py",
        "backend/app/force.pth",
        "frontend/playwright.config.ts",
        "backend/zz_force-1.0.dist-info/entry_points.txt",
        "backend/zz_force.egg-info/entry_points.txt",
        "frontend/node_modules/@playwright/test/index.js",
        "node_modules/.bin/playwright",
        "frontend/.npmrc",
        ".yarnrc.yml",
        "bunfig.toml",
    ],
)
def test_harness_files_are_refused_for_every_source(path):
    """Pytest config, conftest, interpreter start-up hooks and Playwright config are the harness's, whatever
    the source record lists: an untrusted patch touching one is `patch_touches_tests`."""
    demo = load_source("demo")
    bare = dataclasses.replace(demo, test_file_patterns=("backend/tests/**",), test_infra_patterns=())
    diff = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x = 1\n"
    assert problems_status(validate_patch(diff, bare)) == Status.PATCH_TOUCHES_TESTS
    assert bare.is_test_infra(path)
