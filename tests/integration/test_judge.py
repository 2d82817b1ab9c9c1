"""The judge cannot be forged (issue 15): one hostile patch per class, on the demo backend bugfix instance.

None is resolved, and each verdict names what was detected. Frontend forms of the same classes, on the
frontend-only and fullstack instances, are in test_judge_frontend.py. Every attack is the wrong solution of the
task (the fix is missing) plus the trick; the trick is what the assertions are about.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from attack_kit import BUGFIX, F2P, FORCE_PASS_PLUGIN, Task, logs, new, said

from tasks_lib.judge import evaluation, static_check

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FORGED_JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
    'skipped="0" tests="1"><testcase classname="tests.test_items" name="test_read_item_not_found" '
    'file="tests/test_items.py" time="0.1"/></testsuite></testsuites>'
)

# A whole fake test runner: it writes a report and a summary that agree with each other.
FAKE_PYTEST = f"""
import sys

for arg in sys.argv[1:]:
    if arg.startswith("--junitxml="):
        open(arg.split("=", 1)[1], "w").write({FORGED_JUNIT!r})
print("=== short test summary info ===")
print("PASSED {F2P}")
print("=== 1 passed in 0.01s ===")
raise SystemExit(0)
"""


# About ten lines of application code that replace the runner's report objects when the tests import it.
IN_MEMORY = """
import _pytest.reports as reports

_orig = reports.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    report = _orig(cls, item, call)
    report.outcome = "passed"
    report.longrepr = None
    return report


reports.TestReport.from_item_and_call = classmethod(_forged)
"""

# The same without naming the runner: the module name is computed, the config found by walking the GC, a
# plugin registered that rewrites every report before the reporters see it.
IN_MEMORY_VIA_GC = """
import gc
import importlib

_config = importlib.import_module("".join(["_py", "test", ".config"]))


class _Force:
    def __getattr__(self, name):
        raise AttributeError(name)


def _rewrite(report):
    if report.when == "call":
        report.outcome = "passed"
        report.longrepr = None


setattr(_Force, "pytest_runtest_" + "logreport", staticmethod(_rewrite))
for _obj in gc.get_objects():
    if isinstance(_obj, _config.Config):
        _obj.pluginmanager.register(_Force(), "force")
        break
"""


@pytest.fixture(scope="module")
def task(curated_demo):
    return Task(BUGFIX)


def _f2p_outcome(verdict) -> str:
    return next(t.outcome for t in verdict.tests if t.test_id == F2P)


@pytest.mark.parametrize(
    ("name", "patch", "shadowed"),
    [
        ("module", new("backend/pytest.py", FAKE_PYTEST), "pytest"),
        (
            "package",
            new("backend/pytest/__init__.py", "# a package\n")
            + new("backend/pytest/__main__.py", FAKE_PYTEST),
            "pytest",
        ),
        ("pluggy", new("backend/pluggy/__init__.py", "raise SystemExit(0)\n"), "pluggy"),
        ("stdlib", new("backend/json.py", "raise SystemExit(0)\n"), "json"),
    ],
)
def test_a_runner_module_shadowed_from_the_work_tree_is_never_loaded(task, tmp_path, name, patch, shadowed):
    """A module or package next to the tests named like the runner, one of its dependencies or the standard
    library (names computed from the image) is treated like a protected file: removed, patch_touches_tests."""
    v = task.score(patch, tmp_path / name)
    assert not v.resolved and v.status == "patch_touches_tests", said(v)
    assert f"shadows the installed module '{shadowed}'" in v.note


def test_plugin_metadata_in_the_work_tree_is_never_loaded(task, tmp_path, no_validator):
    """A `*.dist-info` with a pytest11 entry point in the tree (importlib.metadata would find it on sys.path
    and pytest autoload it) is package metadata: the validator refuses it, and with the validator off the
    container removes it."""
    patch = (
        new("backend/app/force_pass.py", FORCE_PASS_PLUGIN)
        + new("backend/zz_force-1.0.dist-info/entry_points.txt", "[pytest11]\nforce = app.force_pass\n")
        + new(
            "backend/zz_force-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zz-force\nVersion: 1.0\n"
        )
    )
    v = task.score(patch, tmp_path / "dist_info")
    assert not v.resolved and v.status == "patch_touches_tests", said(v)
    assert "package metadata" in v.note


def test_a_runner_written_at_run_time_is_seen_and_never_loaded(task, tmp_path):
    """The app's code (run by prestart before the tests) writes the fake runner and plugin metadata into the
    import root: the scan after prestart names them, and the launcher loads pytest from the image anyway
    (the F2P test is reported as it really ran: failed)."""
    code = (
        "import pathlib\n"
        "root = pathlib.Path(__file__).resolve().parents[1]\n"
        'for rel, text in (("pytest.py", FAKE), ("zz-1.0.dist-info/entry_points.txt", "[pytest11]\\nzz = app\\n")):\n'
        "    try:\n"
        "        (root / rel).parent.mkdir(exist_ok=True)\n"
        "        (root / rel).write_text(text)\n"
        "    except OSError as exc:\n"
        "        print('hostile: could not write', rel, type(exc).__name__)\n"
    )
    v = task.score(
        task.at_import("backend/app/__init__.py", f"FAKE = {FAKE_PYTEST!r}\n" + code), tmp_path / "rt"
    )
    assert not v.resolved, said(v)
    assert any(
        "backend/pytest.py" in t and "shadows the installed module 'pytest'" in t for t in v.tampering
    ), said(v)
    assert any("dist-info" in t for t in v.tampering), said(v)
    assert _f2p_outcome(v) == "failed"


@pytest.mark.parametrize("static", ["on", "off"])
def test_in_memory_subversion_of_the_reports(task, tmp_path, monkeypatch, static):
    """Application code imported by the tests replaces the runner's report factory: every test reports passed
    and the JUnit file and the terminal summary agree. The must-fail witness comes back passed and the launcher's
    audit sees the replaced function; the static check names the import of the runner. With the static check
    off, the run-time witnesses alone still make it a failure."""
    if static == "off":
        monkeypatch.setattr(static_check, "scan", lambda *a, **k: [])
    v = task.score(task.at_import("backend/app/main.py", IN_MEMORY), tmp_path / static)
    assert not v.resolved and v.blame == "patch", said(v)
    assert any("(must fail) was reported passed" in t for t in v.tampering), said(v)
    assert any("TestReport.from_item_and_call was replaced" in t for t in v.tampering), said(v)
    if static == "on":
        assert any(f.startswith("runner:") and "backend/app/hostile.py" in f for f in v.static_flags), said(v)


def test_in_memory_subversion_through_the_garbage_collector(task, tmp_path, monkeypatch):
    """The same without naming the runner (computed module name, the config found by walking the GC, a plugin
    registered at import that rewrites reports): with the static check off, the launcher's audit of the
    registered hooks names the plugin and the file it came from."""
    monkeypatch.setattr(static_check, "scan", lambda *a, **k: [])
    v = task.score(task.at_import("backend/app/main.py", IN_MEMORY_VIA_GC), tmp_path / "gc")
    assert not v.resolved and v.blame == "patch", said(v)
    assert any(
        "pytest_runtest_logreport of plugin 'force' is defined in /work/repo/backend/app/hostile.py" in t
        for t in v.tampering
    ), said(v)


def test_static_check_flags_the_gc_walk(task):
    """Unit-level view of the same patch: walking the GC is an introspection finding, the computed import an
    obfuscation finding (shown, not blocking alone)."""
    findings = static_check.scan(task.at_import("backend/app/main.py", IN_MEMORY_VIA_GC), task.source)
    kinds = {(f.category, f.what) for f in findings}
    assert ("introspection", "walks the garbage collector") in kinds
    assert any(c == "obfuscation" for c, _ in kinds)
    assert static_check.blocking(findings)


def test_hidden_tests_cannot_be_rewritten_at_run_time(task, tmp_path):
    """App code imported by the tests (and by prestart) tries to rewrite the injected test file, rename the
    test folder and drop a conftest next to it: the test file and its folder are root's, the write and the rename
    are refused, and the conftest it could create in the (sticky) backend folder is named by the scan."""
    code = (
        "import pathlib\n"
        "root = pathlib.Path(__file__).resolve().parents[1]\n"
        "target = root / 'tests' / 'test_items.py'\n"
        "for what, act in (\n"
        "    ('rewrite', lambda: target.write_text(target.read_text().replace('assert ', 'assert True or '))),\n"
        "    ('rename', lambda: (root / 'tests').rename(root / 'tests_orig')),\n"
        "    ('chmod', lambda: target.chmod(0o666)),\n"
        f"    ('conftest', lambda: (root / 'conftest.py').write_text({FORCE_PASS_PLUGIN!r})),\n"
        "):\n"
        "    try:\n"
        "        act()\n"
        "        print('hostile: did', what)\n"
        "    except OSError as exc:\n"
        "        print('hostile: could not', what, type(exc).__name__)\n"
    )
    v = task.score(task.at_import("backend/app/__init__.py", code), tmp_path / "rewrite")
    assert not v.resolved, said(v)
    text = logs(v)
    for what in ("rewrite", "rename", "chmod"):
        assert f"hostile: could not {what} PermissionError" in text
    assert any("backend/conftest.py" in t and "runner-relevant" in t for t in v.tampering), said(v)


def test_a_summary_appended_at_exit_is_not_the_one_read(task, tmp_path):
    """At exit, the app rewrites the JUnit report to all-passed and prints a forged summary after pytest's: the
    log holds two summaries (the runner prints one), and the witnesses are missing from the forged report."""
    code = (
        "import atexit, sys\n"
        f"FORGED = {FORGED_JUNIT!r}\n"
        "def forge():\n"
        "    for arg in sys.argv:\n"
        "        if arg.startswith('--junitxml='):\n"
        "            open(arg.split('=', 1)[1], 'w').write(FORGED)\n"
        f"    sys.stdout.write('=== short test summary info ===\\nPASSED {F2P}\\n=== 1 passed in 0.01s ===\\n')\n"
        "    sys.stdout.flush()\n"
        "atexit.register(forge)\n"
    )
    v = task.score(task.at_import("backend/app/main.py", code), tmp_path / "appended")
    assert not v.resolved, said(v)
    assert any("2 short test summaries" in t for t in v.tampering), said(v)
    assert any("witness" in t and "missing" in t for t in v.tampering), said(v)


def test_a_hanging_patch_is_its_own_timeout_after_one_attempt(task, tmp_path):
    """The patch makes the route the tests call hang, with the source's timeout lowered to 40 s: one attempt,
    `timeout` charged to the patch (exit 1, never retried as infrastructure), within timeout + 30 s."""
    patch = task.hanging_route()
    source = dataclasses.replace(task.source, backend=dataclasses.replace(task.source.backend, timeout_s=40))
    start = time.monotonic()
    v = evaluation.score_instance(
        task.instance,
        task.prediction(patch),
        source,
        task.repo,
        tmp_path / "hang",
        cache=evaluation.VerdictCache(tmp_path / "c"),
    )
    elapsed = time.monotonic() - start
    assert v.status == "timeout" and v.blame == "patch" and not v.infra_failure, said(v)
    assert v.attempts == 1
    assert elapsed <= 40 + 30, elapsed


FLOOD = """
import sys

_chunk = b"x" * (1 << 20) + b"\\n"
for _ in range(400):
    sys.stdout.buffer.write(_chunk)
sys.stdout.flush()
"""

# Scores one patch in a process of its own and prints its peak memory (ru_maxrss, KiB) with the verdict.
SCORE_AND_MEASURE = """
import json, resource, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from attack_kit import Task
task = Task(sys.argv[1])
v = task.score(Path(sys.argv[2]).read_text(), Path(sys.argv[3]))
print(json.dumps({"status": v.status, "blame": v.blame, "attempts": v.attempts, "note": v.note,
                  "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _score_in_a_process(tmp_path, name: str, patch: str) -> dict:
    patch_file = tmp_path / f"{name}.diff"
    patch_file.write_text(patch)
    kit = str(Path(__file__).parent)
    res = subprocess.run(
        [sys.executable, "-c", SCORE_AND_MEASURE, BUGFIX, str(patch_file), str(tmp_path / name), kit],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_an_output_flood_is_cut_inside_the_container_and_charged_to_the_patch(task, tmp_path):
    """App code prints 400 MiB when imported (prestart imports it): the runner cuts the log at the cap, stops the
    run and charges it to the patch, in one attempt; the harness process's peak memory (ru_maxrss of a process
    that scores only this patch) is within the 64 MiB cap of the same process scoring the empty patch."""
    baseline = _score_in_a_process(tmp_path, "empty", "")
    got = _score_in_a_process(tmp_path, "flood", task.at_import("backend/app/__init__.py", FLOOD))
    assert got["blame"] == "patch" and got["attempts"] == 1 and got["status"] == "tests_failed", got
    assert "cap" in got["note"], got
    assert got["maxrss_kb"] - baseline["maxrss_kb"] < 64 * 1024, (got, baseline)
    log = next((tmp_path / "flood").rglob("prestart.log"))
    assert 60 * 2**20 < log.stat().st_size < 65 * 2**20
