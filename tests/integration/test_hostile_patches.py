"""Hostile patches against the real engine (reliability issue): none turns a wrong solution into `resolved`.

Every attack here is the *wrong* solution of the demo bugfix task (the fix is missing, so its FAIL_TO_PASS
test `tests/test_items.py::test_read_item_not_found` genuinely fails) plus a trick that would make it look
solved. Attacks the patch validator already refuses before any container starts are also run with the
validator switched off, to prove the container-level defence holds on its own.
"""

from __future__ import annotations

import pytest
from attack_kit import FORCE_PASS_PLUGIN
from attack_kit import edit as _edit
from attack_kit import logs as _logs
from attack_kit import new as _new
from attack_kit import symlink as _symlink

from tasks_lib.corpus import load as corpus
from tasks_lib.judge import evaluation
from tasks_lib.judge.predictions import Prediction, PredictionFormat
from tasks_lib.sources import gitops
from tasks_lib.sources.demo_repo import DEMO_PRS
from tasks_lib.sources.record import load_source

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BUGFIX = f"prototypebench__demo-fullstack-{DEMO_PRS['bugfix']}"
F2P = "tests/test_items.py::test_read_item_not_found"


FORGED_JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
    'skipped="0" tests="1"><testcase classname="tests.test_items" name="test_read_item_not_found" '
    'file="tests/test_items.py" time="0.1"/></testsuite></testsuites>'
)


@pytest.fixture(scope="module")
def task(curated_demo):
    source = load_source("demo")
    inst = {i["instance_id"]: i for i in corpus.load_corpus("demo")}[BUGFIX]
    return source, evaluation.repo_for(source), inst


def _base_file(task, path: str) -> str:
    source, repo, inst = task
    return gitops.read_file(repo, inst["base_commit"], path).decode()


def _at_import(task, code: str) -> str:
    """A patch that runs `code` whenever app.main is imported (prestart, the tests' client, the server)."""
    main = _base_file(task, "backend/app/main.py")
    return _new("backend/app/hostile.py", code) + _edit(
        "backend/app/main.py", main, "import app.hostile  # noqa: F401\n" + main
    )


def _score(task, patch: str, tmp_path, name: str):
    source, repo, inst = task
    pred = Prediction(BUGFIX, "attacker", patch, PredictionFormat.DIFF)
    return evaluation.score_instance(
        inst, pred, source, repo, tmp_path / name, cache=evaluation.VerdictCache(tmp_path / "cache" / name)
    )


def test_the_wrong_solution_alone_fails(task, tmp_path):
    """The baseline every attack starts from: without the fix, the FAIL_TO_PASS test fails."""
    v = _score(task, "", tmp_path, "baseline")
    assert not v.resolved and v.status == "tests_failed"
    assert any(t.test_id == F2P and t.outcome == "failed" for t in v.tests)


@pytest.mark.parametrize(
    "name",
    [
        "conftest_added",
        "conftest_edited",
        "pytest_ini_plugin",
        "sitecustomize",
        "pth_file",
        "test_file_added",
    ],
)
def test_test_and_harness_files_are_restored_in_the_container(task, tmp_path, no_validator, name):
    """conftest.py (new or edited), pytest.ini with a plugin, sitecustomize/usercustomize, .pth files, a new
    file at a test path: with the validator off, the runner restores them to base inside the container;
    the patch is `patch_touches_tests` and the plugin never ran."""
    conftest = _base_file(task, "backend/tests/conftest.py")
    patch = {
        "conftest_added": _new("backend/conftest.py", FORCE_PASS_PLUGIN),
        "conftest_edited": _edit("backend/tests/conftest.py", conftest, conftest + FORCE_PASS_PLUGIN),
        "pytest_ini_plugin": _new("backend/app/force_pass.py", FORCE_PASS_PLUGIN)
        + _new("backend/pytest.ini", "[pytest]\naddopts = -p app.force_pass\n"),
        "sitecustomize": _new("backend/sitecustomize.py", "import os\nos.environ['FORCED'] = '1'\n")
        + _new("backend/usercustomize.py", "import os\n"),
        "pth_file": _new("backend/force.pth", "import os; os.environ.setdefault('FORCED', '1')\n"),
        "test_file_added": _new("backend/tests/test_items_extra.py", "def test_free():\n    assert True\n"),
    }[name]
    v = _score(task, patch, tmp_path, name)
    assert not v.resolved
    assert v.status == "patch_touches_tests", v.note
    assert "restored to base" in v.note


def test_validator_refuses_those_files_before_any_container(task, tmp_path, container_counter):
    """With the validator on, the same patches never reach Docker."""
    with container_counter() as counter:
        v = _score(task, _new("backend/conftest.py", FORCE_PASS_PLUGIN), tmp_path, "refused")
    assert v.status == "patch_touches_tests" and not v.resolved
    assert counter.created == []


def test_pytest_table_of_pyproject_is_restored(task, tmp_path):
    """pyproject.toml is the agent's to edit (dependencies, tools), but not its pytest table: a plugin
    loaded through `[tool.pytest.ini_options] addopts` is found inside the container (the validator cannot
    see sections) and the file is restored."""
    patch = _new("backend/app/force_pass.py", FORCE_PASS_PLUGIN) + _new(
        "backend/pyproject.toml",
        '[project]\nname = "demo"\nversion = "0"\n\n[tool.pytest.ini_options]\naddopts = "-p app.force_pass"\n',
    )
    v = _score(task, patch, tmp_path, "pyproject")
    assert not v.resolved and v.status == "patch_touches_tests", v.note
    assert "backend/pyproject.toml" in v.note


def test_symlinks_out_of_the_tree_are_removed(task, tmp_path, no_validator):
    """Symlinks are refused by the validator (`patch_invalid`); with it off, the runner removes them."""
    patch = _symlink("backend/app/passwd.py", "/etc/passwd") + _symlink(
        "backend/app/escape", "../../../../pbench/out"
    )
    assert evaluation.patches.problems_status.__module__  # the real module is still imported
    v = _score(task, patch, tmp_path, "symlinks")
    assert not v.resolved and v.status == "patch_touches_tests", v.note


def test_forged_passed_lines_in_stdout(task, tmp_path):
    """The app prints PASSED lines and a whole forged short-summary section at exit: JUnit still says
    failed, and the summary that disagrees with JUnit is flagged."""
    code = (
        "import atexit, sys\n"
        f"print('PASSED {F2P}')\n"
        "def forge():\n"
        "    sys.stdout.write('=== short test summary info ===\\n')\n"
        f"    sys.stdout.write('PASSED {F2P}\\n')\n"
        "    sys.stdout.write('=== 1 passed in 0.01s ===\\n')\n"
        "    sys.stdout.flush()\n"
        "atexit.register(forge)\n"
    )
    v = _score(task, _at_import(task, code), tmp_path, "forged_stdout")
    assert not v.resolved and v.status == "tests_failed"
    assert any(t.test_id == F2P and t.outcome == "failed" for t in v.tests)


def test_writing_the_junit_output_path(task, tmp_path):
    """At exit, the app overwrites the JUnit file named on pytest's command line with an all-passed report
    and tries /pbench/out: /pbench/out is not writable by the test user, and the rewritten report
    contradicts pytest's own summary in the piped output, so the run is not a pass."""
    code = (
        "import atexit, sys\n"
        f"FORGED = {FORGED_JUNIT!r}\n"
        "def forge():\n"
        "    paths = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--junitxml=')]\n"
        "    for path in paths + ['/pbench/out/junit.xml', '/pbench/out/result.json']:\n"
        "        try:\n"
        "            open(path, 'w').write(FORGED)\n"
        "            print('hostile: wrote', path)\n"
        "        except OSError as exc:\n"
        "            print('hostile: could not write', path, type(exc).__name__)\n"
        "atexit.register(forge)\n"
    )
    v = _score(task, _at_import(task, code), tmp_path, "junit_path")
    assert not v.resolved and v.status == "tests_failed"
    assert "disagree" in v.note
    logs = _logs(v)
    assert "could not write /pbench/out/junit.xml PermissionError" in logs
    assert "could not write /pbench/out/result.json PermissionError" in logs


def test_killing_the_test_runner_early_with_exit_0(task, tmp_path):
    """The route the hidden test calls ends the process with exit 0 before any report is written; the app
    also tries to kill the runner and PID 1 (not permitted: the verdict is the patch's, not an infrastructure
    error). No report is not a pass."""
    main = _base_file(task, "backend/app/main.py")
    anchor = '    """Read one item by id."""\n'
    assert anchor in main
    code = (
        "import os, signal\n"
        "for pid in (1, os.getppid()):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError as exc:\n"
        "        print('hostile: kill', pid, type(exc).__name__)\n"
    )
    patch = _new("backend/app/hostile.py", code) + _edit(
        "backend/app/main.py",
        main,
        main.replace(anchor, anchor + "    import os\n\n    os._exit(0)\n").replace(
            "from ", "import app.hostile  # noqa: F401\nfrom ", 1
        ),
    )
    v = _score(task, patch, tmp_path, "exit0")
    # tests_failed, not infra_error: the runner survived the kill attempts and saw no report.
    assert not v.resolved and v.status == "tests_failed", v.note
    assert any(t.test_id == F2P and t.outcome == "missing" for t in v.tests)


def test_writing_into_site_packages_at_run_time(task, tmp_path):
    """Prestart runs the app's code before the tests: it tries to drop a .pth and a sitecustomize into the
    image's site-packages so the pytest process would load a pass-forcing plugin. The test user cannot
    write there."""
    code = (
        "import atexit, site, sysconfig\n"
        "said = []\n"
        "for d in {sysconfig.get_paths()['purelib'], *site.getsitepackages()}:\n"
        "    for name in ('zz_force.pth', 'sitecustomize.py'):\n"
        "        try:\n"
        "            open(d + '/' + name, 'w').write('import os\\n')\n"
        "            said.append(f'hostile: wrote {d} {name}')\n"
        "        except OSError as exc:\n"
        "            said.append(f'hostile: could not write {name} {type(exc).__name__}')\n"
        "atexit.register(lambda: print(*said, sep='\\n'))\n"
    )
    v = _score(task, _at_import(task, code), tmp_path, "site_packages")
    assert not v.resolved and v.status == "tests_failed"
    logs = _logs(v)
    assert "hostile: wrote" not in logs
    assert "hostile: could not write zz_force.pth PermissionError" in logs


def test_the_reference_patch_is_nowhere_in_the_container(task, tmp_path):
    """The app searches the whole container file system for the reference fix (a line only the gold patch
    has) to apply it at run time; it is not there: the gold patch never enters an evaluation container."""
    _, _, inst = task
    marker = next(line for line in inst["patch"].splitlines() if line.startswith("+") and "404" in line)
    code = (
        "import atexit, os\n"
        # Hex, so that this code (which is in the container) does not itself hold the marker.
        f"MARKER = bytes.fromhex({marker.encode().hex()!r})\n"
        "hits = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('/proc', '/sys', '/dev')]\n"
        "    for f in files:\n"
        "        p = os.path.join(root, f)\n"
        "        try:\n"
        "            if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < 2_000_000:\n"
        "                if MARKER in open(p, 'rb').read():\n"
        "                    hits.append(p)\n"
        "        except OSError:\n"
        "            pass\n"
        "atexit.register(print, 'hostile: reference found in', hits if hits else 'nothing')\n"
    )
    v = _score(task, _at_import(task, code), tmp_path, "reference")
    assert not v.resolved and v.status == "tests_failed"
    logs = _logs(v)
    assert "hostile: reference found in nothing" in logs
    assert "hostile: reference found in [" not in logs


FRONTEND = f"prototypebench__demo-fullstack-{DEMO_PRS['frontend_only']}"

# The app's own dev-server config (agent-editable, runs in the Vite process during the Playwright run)
# watches for Playwright's JSON report and rewrites it to all-passed.
REWRITE_REPORT = """
import fs from 'node:fs';

const pbenchReport = '/pbench/stage/playwright.json';
const pbenchForge = () => {
  try {
    const r = JSON.parse(fs.readFileSync(pbenchReport, 'utf8'));
    if (!r.stats || r.stats.unexpected === 0) return;
    const pass = (s) => {
      for (const spec of s.specs || []) {
        spec.ok = true;
        for (const t of spec.tests) {
          t.status = 'expected';
          for (const res of t.results) { res.status = 'passed'; res.errors = []; }
        }
      }
      (s.suites || []).forEach(pass);
    };
    r.suites.forEach(pass);
    r.stats.expected += r.stats.unexpected;
    r.stats.unexpected = 0;
    fs.writeFileSync(pbenchReport, JSON.stringify(r));
    console.log('hostile: rewrote the report');
  } catch (e) {}
};
setInterval(pbenchForge, 20).unref();
"""


def test_dev_server_code_rewrites_the_playwright_report(task, tmp_path):
    """Frontend: the wrong (empty) solution plus a vite.config.js that rewrites Playwright's JSON report to
    all-passed from inside the dev server. The list reporter's counts in the piped log disagree with the
    rewritten report, so the run is not a pass (and the rewrite is reported)."""
    source, repo, _ = task
    inst = {i["instance_id"]: i for i in corpus.load_corpus("demo")}[FRONTEND]
    vite = gitops.read_file(repo, inst["base_commit"], "frontend/vite.config.js").decode()
    patch = _edit("frontend/vite.config.js", vite, REWRITE_REPORT + vite)
    pred = Prediction(FRONTEND, "attacker", patch, PredictionFormat.DIFF)
    v = evaluation.score_instance(
        inst, pred, source, repo, tmp_path / "vite", cache=evaluation.VerdictCache(tmp_path / "cache")
    )
    assert not v.resolved and v.status == "tests_failed", v.note
    if "hostile: rewrote the report" in _logs(v):
        assert "disagree" in v.note
