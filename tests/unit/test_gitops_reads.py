"""The dependency-file reads a scoring makes before any container: a commit's files read once per process, patches
that cannot touch a lock file not applied at all, and (for short commands) tables built without pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tasks_lib.sources import gitops

LOCK = "backend/uv.lock"


@pytest.fixture
def repo(tmp_path):
    work = tmp_path / "work"
    (work / "backend").mkdir(parents=True)
    (work / LOCK).write_text("version = 1\n")
    (work / "backend" / "app.py").write_text("x = 1\n")
    run = lambda *a: subprocess.run(["git", *a], cwd=work, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True
    ).stdout.strip()
    return work / ".git", sha


@pytest.fixture
def git_calls(monkeypatch):
    calls: list[list[str]] = []
    real = gitops.git

    def counting(args, *a, **kw):
        calls.append(list(args))
        return real(args, *a, **kw)

    monkeypatch.setattr(gitops, "git", counting)
    monkeypatch.setattr(gitops, "_BLOBS", {})
    return calls


def _diff(path: str, old: str, new: str, header_path: str | None = None) -> str:
    h = header_path or path
    return textwrap.dedent(f"""\
        diff --git a/{h} b/{h}
        --- a/{h}
        +++ b/{h}
        @@ -1 +1 @@
        -{old}
        +{new}
        """)


def test_a_commits_file_is_read_once_per_process(repo, git_calls):
    git_dir, sha = repo
    assert gitops.read_file(git_dir, sha, LOCK) == b"version = 1\n"
    assert gitops.read_file(git_dir, sha, LOCK) == b"version = 1\n"
    assert len(git_calls) == 1


def test_a_ref_name_is_read_again_every_time(repo, git_calls):
    git_dir, _ = repo
    gitops.read_file(git_dir, "main", LOCK)
    gitops.read_file(git_dir, "main", LOCK)
    assert len(git_calls) == 2  # a branch moves; only a sha's content is fixed


def test_an_absent_file_is_none_and_not_kept(repo, git_calls):
    git_dir, sha = repo
    assert gitops.read_file(git_dir, sha, "backend/poetry.lock") is None
    assert gitops.read_file(git_dir, sha, "backend/poetry.lock") is None
    assert len(git_calls) == 2


def test_a_patch_that_names_no_dependency_file_is_not_applied(git_calls):
    contents = {LOCK: b"version = 1\n"}
    out = gitops.patched_files(contents, [_diff("backend/app.py", "x = 1", "x = 2")])
    assert out == contents and out is not contents
    assert git_calls == []


def test_a_patch_that_changes_the_lock_is_applied(git_calls):
    out = gitops.patched_files({LOCK: b"version = 1\n"}, [_diff(LOCK, "version = 1", "version = 2")])
    assert out == {LOCK: b"version = 2\n"}
    assert [c[0] for c in git_calls] == ["apply"]


def test_a_quoted_header_keeps_the_patch_in(git_calls):
    """git's C-style quoting can spell `uv.lock` with an octal escape: the name is then not in the text, and
    the patch must still go through git apply (which decodes it) rather than be skipped."""
    quoted = _diff(LOCK, "version = 1", "version = 3").replace("a/backend/uv.lock", '"a/backend/uv\\056lock"')
    quoted = quoted.replace("b/backend/uv.lock", '"b/backend/uv\\056lock"')
    assert "uv.lock" not in quoted
    out = gitops.patched_files({LOCK: b"version = 1\n"}, [quoted])
    assert [c[0] for c in git_calls] == ["apply"]
    assert out == {LOCK: b"version = 3\n"}


def test_a_glob_dependency_name_keeps_every_patch_in(git_calls):
    gitops.patched_files({"requirements*.txt": None}, [_diff("backend/app.py", "x = 1", "x = 2")])
    assert [c[0] for c in git_calls] == ["apply"]


def test_finish_run_tables_are_built_without_importing_pandas():
    """pyarrow imports pandas on the first array it builds; inside arrow_without_pandas it does not, and
    pandas interop still works once the block is left."""
    code = textwrap.dedent("""\
        import sys
        import pyarrow as pa
        from tasks_lib.judge.runs import arrow_without_pandas
        with arrow_without_pandas():
            table = pa.Table.from_pylist([{"a": "x", "b": 1}])
        assert "pandas" not in sys.modules, "pandas imported"
        assert table.to_pandas()["b"].tolist() == [1]
        print("ok")
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
