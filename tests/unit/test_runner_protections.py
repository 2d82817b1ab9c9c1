"""The in-container runner's protections, run on the host against a real git work tree.

`restore_protected` is what stands between an untrusted patch and the tests once the patch is applied;
`collect_stage` is how reports written by the unprivileged test user reach /pbench/out.
"""

from __future__ import annotations

import os

import pytest

PATTERNS = ["backend/tests/**", "**/conftest.py"]


@pytest.fixture(scope="module")
def runner(runner_import):
    return runner_import("pbench_runner")


BASE = {
    "backend/tests/test_a.py": "def test_a():\n    assert False\n",
    "backend/app/x.py": "X = 1\n",
    "backend/pyproject.toml": '[project]\nname = "x"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n',
    "backend/setup.cfg": "[flake8]\nmax-line-length = 100\n\n[tool:pytest]\ntestpaths = tests\n",
}


@pytest.fixture
def tree(tmp_path, runner):
    repo = tmp_path / "repo"
    for rel, text in BASE.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    runner.git_quiet(["init", "-q"], repo)
    runner.snapshot(repo, "base")
    runner.git_quiet(["tag", runner.BASE_TAG], repo)
    return repo


def _restore(runner, repo, tmp_path):
    return dict(runner.restore_protected(PATTERNS, repo, tmp_path / "patch.log"))


def test_tests_harness_files_and_symlinks_are_restored(runner, tree, tmp_path):
    (tree / "backend/tests/test_a.py").write_text("def test_a():\n    assert True\n")
    (tree / "backend/tests/test_new.py").write_text("def test_free():\n    pass\n")
    (tree / "backend/conftest.py").write_text("# a plugin\n")
    (tree / "backend/sitecustomize.py").write_text("import os\n")
    (tree / "backend/evil.pth").write_text("import os\n")
    (tree / "backend/pytest.ini").write_text("[pytest]\naddopts = -p evil\n")
    os.symlink("/etc/passwd", tree / "backend/app/passwd.py")
    (tree / "backend/app/x.py").write_text("X = 2\n")  # the agent's own code: kept

    restored = _restore(runner, tree, tmp_path)

    assert restored == {
        "backend/tests/test_a.py": "test file",
        "backend/tests/test_new.py": "test file",
        "backend/conftest.py": "test file",
        "backend/sitecustomize.py": "harness file",
        "backend/evil.pth": "harness file",
        "backend/pytest.ini": "harness file",
        "backend/app/passwd.py": "symlink",
    }
    assert (tree / "backend/tests/test_a.py").read_text() == BASE["backend/tests/test_a.py"]
    for gone in ("backend/tests/test_new.py", "backend/conftest.py", "backend/sitecustomize.py"):
        assert not (tree / gone).exists()
    assert not (tree / "backend/app/passwd.py").is_symlink()
    assert (tree / "backend/app/x.py").read_text() == "X = 2\n"


def test_a_tracked_file_replaced_by_a_symlink_gets_its_content_back(runner, tree, tmp_path):
    (tree / "backend/app/x.py").unlink()
    os.symlink("../../../pbench/out/junit.xml", tree / "backend/app/x.py")
    assert _restore(runner, tree, tmp_path) == {"backend/app/x.py": "symlink"}
    assert not (tree / "backend/app/x.py").is_symlink()
    assert (tree / "backend/app/x.py").read_text() == "X = 1\n"


def test_pyproject_and_setup_cfg_count_only_by_their_pytest_tables(runner, tree, tmp_path):
    pyproject = tree / "backend/pyproject.toml"
    setup_cfg = tree / "backend/setup.cfg"
    pyproject.write_text(
        BASE["backend/pyproject.toml"].replace('name = "x"', 'name = "x"\ndependencies = ["a"]')
    )
    setup_cfg.write_text(BASE["backend/setup.cfg"].replace("100", "120"))
    assert _restore(runner, tree, tmp_path) == {}
    runner.snapshot(tree, "agent edits other tables")

    pyproject.write_text(pyproject.read_text().replace('"-q"', '"-q -p evil"'))
    setup_cfg.write_text(setup_cfg.read_text().replace("testpaths = tests", "testpaths = app"))
    assert _restore(runner, tree, tmp_path) == {
        "backend/pyproject.toml": "pytest configuration",
        "backend/setup.cfg": "pytest configuration",
    }
    assert '"-q"' in pyproject.read_text() and "dependencies" in pyproject.read_text()


def test_new_or_unreadable_pyproject_with_a_pytest_table(runner, tree, tmp_path):
    (tree / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-p evil"\n')
    (tree / "backend/pyproject.toml").write_text("[tool.pytest.ini_options\nbroken")
    assert _restore(runner, tree, tmp_path) == {
        "pyproject.toml": "pytest configuration",
        "backend/pyproject.toml": "pytest configuration",
    }
    assert not (tree / "pyproject.toml").exists()
    assert (tree / "backend/pyproject.toml").read_text() == BASE["backend/pyproject.toml"]


def test_collect_stage_copies_regular_files_only(runner, tmp_path, monkeypatch):
    stage, out = tmp_path / "stage", tmp_path / "out"
    (stage / "test-results" / "t1").mkdir(parents=True)
    out.mkdir()
    monkeypatch.setattr(runner, "OUT", out)
    (stage / "junit.xml").write_text("<testsuites/>")
    (stage / "test-results" / "t1" / "trace.zip").write_bytes(b"zip")
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    os.symlink(secret, stage / "playwright.json")
    os.symlink(tmp_path, stage / "linked-dir")
    os.mkfifo(stage / "pipe")
    (out / "test.log").write_text("the runner's own log")
    (stage / "test.log").write_text("forged log")

    runner.collect_stage(stage, out=out)

    assert (out / "junit.xml").read_text() == "<testsuites/>"
    assert (out / "test-results" / "t1" / "trace.zip").read_bytes() == b"zip"
    assert not (out / "playwright.json").exists()
    assert not (out / "linked-dir").exists() and not (out / "pipe").exists()
    assert (out / "test.log").read_text() == "the runner's own log"


def test_run_untrusted_output_goes_through_a_pipe(runner, tmp_path, monkeypatch):
    """Same-user mode (not root in a container): output reaches the log through the runner; the child's
    stdout is a pipe, not the log file it could truncate."""
    monkeypatch.setenv("PBENCH_RUNNER_SAME_USER", "1")
    log = tmp_path / "test.log"
    budget = runner.OutputBudget(1 << 20)
    code, _ = runner.run_untrusted(
        "ls -l /proc/self/fd/1; echo hello; exit 3", tmp_path, log, dict(os.environ), budget, shell=True
    )
    text = log.read_text()
    assert code == 3
    assert "hello" in text and "pipe:" in text and "[exit 3]" in text
