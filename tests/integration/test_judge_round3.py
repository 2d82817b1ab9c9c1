"""The judge, round 3 (issue 35): patches written against this public harness, one per class, none resolved.

Every attack is the wrong solution of a demo task (the fix is missing) plus a trick that beat the harness before
this round: its canaries were files of their own, so a forger acting only on the hidden test file never touched
one; its audit trusted what the agent controls; its records were files the tested process could rewrite at
exit; its protections read configs differently from the tools. The static check is off in every attack (the
run-time evidence alone must hold). Each verdict's `tampering` (or its restore note) names what was seen.
"""

from __future__ import annotations

import dataclasses

import pytest
from attack_kit import BUGFIX, F2P, Task, edit, new, said

from tasks_lib.judge import evaluation, static_check

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Flips every failed report of the hidden test file into a pass: a forger "by file".
FLIP = """
def _pbench_flip(report):
    if report.nodeid.startswith("tests/test_items.py::") and report.failed:
        report.outcome = "passed"
        report.longrepr = None
    return report
"""

# Class 1 + 3: a hook compiled at run time under the file name of the protected, unchanged conftest and attached
# to that conftest module while it is being imported (the conftest imports the app, the app runs this).
HOOK_UNDER_CONFTEST = (
    '''
import os
import sys

_CONFTEST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "conftest.py")
_SOURCE = """
import pytest
'''
    + FLIP.replace('"', '\\"')
    + '''

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _pbench_flip(outcome.get_result())
"""
_module = sys.modules.get("tests.conftest") or sys.modules.get("conftest")
if _module is not None:
    exec(compile(_SOURCE, _CONFTEST, "exec"), _module.__dict__)
'''
)

# Class 2: rewritten bytecode for the hidden test module, in a cache location redirected at run time.
BYTECODE = """
import importlib.util
import marshal
import os
import pathlib
import struct
import sys

_backend = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_test = pathlib.Path(_backend, "tests", "test_items.py")
sys.pycache_prefix = "/tmp/pbench-hostile-pyc"
try:
    from _pytest.assertion import rewrite as _rw

    _code = compile(_test.read_text().replace("assert ", "assert True or "), str(_test), "exec", dont_inherit=True)
    _dir = _rw.get_cache_dir(_test)
    _dir.mkdir(parents=True, exist_ok=True)
    _st = _test.stat()
    _header = struct.pack("<LL", int(_st.st_mtime) & 0xFFFFFFFF, _st.st_size & 0xFFFFFFFF)
    (_dir / (_test.name[:-3] + _rw.PYC_TAIL)).write_bytes(
        importlib.util.MAGIC_NUMBER + b"\\0\\0\\0\\0" + _header + marshal.dumps(_code)
    )
    print("hostile: wrote", _dir)
except Exception as exc:
    print("hostile: could not write the bytecode", exc)
"""

# Class 3: a replacement reporting function that declares the original as its wrapped function.
WRAPPED = (
    FLIP
    + """
import functools

import _pytest.reports as _reports

_orig = _reports.TestReport.from_item_and_call.__func__


@functools.wraps(_orig)
def _forged(cls, item, call):
    return _pbench_flip(_orig(cls, item, call))


_forged.__wrapped__ = _orig
_reports.TestReport.from_item_and_call = classmethod(_forged)
"""
)

# Class 4: the F2P test really fails; pytest's terminal output goes through a forked child that turns its FAILED
# summary lines into PASSED, and an at-exit handler rewrites the JUnit report (and the old audit file) after the
# launcher wrote them: the two records the old cross-check compared agree. The configure hook that sets the
# filter up is compiled under the conftest's name (class 3), so that the old audit did not see it either.
AFTER_THE_FACT = '''
import os
import sys

_CONFTEST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "conftest.py")
_SOURCE = """
import atexit, os, re, sys

def pytest_configure(config):
    capman = config.pluginmanager.getplugin("capturemanager")
    saved = capman._global_capturing.out.targetfd_save
    read_end, write_end = os.pipe()
    real = os.dup(saved)
    if os.fork() == 0:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as src, os.fdopen(real, "wb", buffering=0) as dst:
            for line in src:
                if line.startswith(b"FAILED tests/test_items.py::"):
                    line = b"PASSED " + line[7:].split(b" - ")[0].rstrip() + b"\\\\n"
                dst.write(line)
        os._exit(0)
    os.close(read_end)
    os.dup2(write_end, saved)
    os.dup2(write_end, 1)
    junit = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--junitxml=")), None)

    def forge():
        if junit and os.path.exists(junit):
            text = open(junit).read()
            text = re.sub(r"<failure[^>]*>.*?</failure>|<failure[^>]*/>", "", text, flags=re.S)
            open(junit, "w").write(text.replace('failures="1"', 'failures="0"'))
        audit = os.path.join(os.path.dirname(junit or "/x"), "audit.json")
        if os.path.exists(audit):
            open(audit, "w").write('{"findings": [], "checked": ["at the end of the session"]}')

    atexit.register(forge)
"""
_module = sys.modules.get("tests.conftest") or sys.modules.get("conftest")
if _module is not None:
    exec(compile(_SOURCE, _CONFTEST, "exec"), _module.__dict__)
'''

FORCE_PLUGIN = (
    FLIP
    + """
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _pbench_flip(outcome.get_result())
"""
)


@pytest.fixture(autouse=True)
def _static_off(monkeypatch):
    monkeypatch.setattr(static_check, "scan", lambda *a, **k: [])


@pytest.fixture(scope="module")
def bugfix(curated_demo):
    return Task(BUGFIX)


def _witness_caught(v) -> bool:
    return any(t.startswith("the witness test ") and "must fail" in t for t in v.tampering)


def _f2p_outcome(verdict) -> str:
    return next(t.outcome for t in verdict.tests if t.test_id == F2P)


def test_a_forger_by_file_flips_a_witness_and_its_hook_is_not_in_its_plugins_source(bugfix, tmp_path):
    """Class 1 and 3: a hook compiled under the unchanged conftest's file name flips every failure of the hidden
    test file. The must-fail witness lives in that file and is flipped too; the launcher sees the protected
    file compiled from other text and the hook whose code is not in the conftest's source."""
    v = bugfix.score(bugfix.at_import("backend/app/main.py", HOOK_UNDER_CONFTEST), tmp_path / "hook")
    assert not v.resolved and v.blame == "patch", said(v)
    assert _witness_caught(v), said(v)
    assert any("compiled at run time under the name of the protected file" in t for t in v.tampering), said(v)
    assert any("pytest_runtest_makereport" in t and "not the code of" in t for t in v.tampering), said(v)


def test_bytecode_from_a_cache_outside_the_tree_never_stands_for_the_tests(bugfix, tmp_path):
    """Class 2: application code redirects sys.pycache_prefix and writes rewritten bytecode of the hidden test
    module there; pytest's import machinery would load it. The audit hook names the bytecode read, the
    launcher finds the collected tests' code differs from the file's, the witness is caught."""
    v = bugfix.score(bugfix.at_import("backend/app/main.py", BYTECODE), tmp_path / "pyc")
    assert not v.resolved and v.blame == "patch", said(v)
    assert any("bytecode read from /tmp/pbench-hostile-pyc" in t for t in v.tampering), said(v)
    assert any(f"the test {F2P}" in t and "not the code of" in t for t in v.tampering), said(v)
    assert any("sys.pycache_prefix was changed" in t for t in v.tampering), said(v)
    assert _witness_caught(v), said(v)


def test_a_replacement_that_declares_the_original_as_wrapped_is_still_a_replacement(bugfix, tmp_path):
    """Class 3: `TestReport.from_item_and_call` replaced by a function whose __wrapped__ is the original: strict
    identity against what was captured before any code of the repository ran, no unwrapping."""
    v = bugfix.score(bugfix.at_import("backend/app/main.py", WRAPPED), tmp_path / "wrapped")
    assert not v.resolved and v.blame == "patch", said(v)
    assert any("TestReport.from_item_and_call was replaced" in t for t in v.tampering), said(v)
    assert _witness_caught(v), said(v)


def test_records_rewritten_after_the_fact_disagree_with_the_evidence_channel(bugfix, tmp_path):
    """Class 4: stdout filtered through a forked child (summary lines FAILED -> PASSED) and the JUnit report
    rewritten at exit: the per-test reports had already left through the channel as the tests ran, so the
    JUnit report disagrees with them, and the findings the old audit file held are in the channel too."""
    v = bugfix.score(bugfix.at_import("backend/app/main.py", AFTER_THE_FACT), tmp_path / "after")
    assert not v.resolved and v.blame == "patch", said(v)
    assert any(f"{F2P}: failed as the tests ran, passed in the JUnit report" in t for t in v.tampering), said(
        v
    )
    assert any("compiled at run time under the name of the protected file" in t for t in v.tampering), said(v)
    assert _witness_caught(v), said(v)


def test_a_pytest_section_header_read_differently_by_two_parsers_is_restored(bugfix, tmp_path, no_validator):
    """Class 6: a new setup.cfg whose `[tool:pytest] # ]` header the standard library reads as another section
    and pytest (iniconfig) as `[tool:pytest]`, with addopts loading a plugin that flips the hidden file's
    failures. The demo's source protects backend/setup.cfg whole; a source that does not (as
    mcp-context-forge's, whose infra patterns are pytest.ini and tox.ini) relies on reading the pytest section:
    read as pytest reads it, it changed: restored, patch_touches_tests."""
    source = dataclasses.replace(
        bugfix.source,
        test_infra_patterns=tuple(p for p in bugfix.source.test_infra_patterns if "setup.cfg" not in p),
    )
    patch = new("backend/setup.cfg", "[tool:pytest] # ]\naddopts = -p app.force_pass\n") + new(
        "backend/app/force_pass.py", FORCE_PLUGIN
    )
    v = evaluation.score_instance(
        bugfix.instance,
        bugfix.prediction(patch),
        source,
        bugfix.repo,
        tmp_path / "ini",
        cache=evaluation.VerdictCache(tmp_path / "cache"),
    )
    assert not v.resolved and v.status == "patch_touches_tests", said(v)
    assert "backend/setup.cfg (pytest configuration)" in v.note, said(v)


def test_a_backend_forger_on_the_fullstack_side(fullstack, tmp_path):
    """The backend classes on the fullstack instance's backend side: a forger by file (class 1) with a hook
    compiled under the conftest's name (class 3)."""
    v = fullstack.score(fullstack.at_import("backend/app/main.py", HOOK_UNDER_CONFTEST), tmp_path / "fs")
    assert not v.resolved and v.backend_status != "resolved", said(v)
    assert _witness_caught(v), said(v)
    assert any("pytest_runtest_makereport" in t and "not the code of" in t for t in v.tampering), said(v)


# ----------------------------------------------------------------------------- frontend forms

# A shim of @playwright/test that fakes `expect` for the hidden spec only, so that specs elsewhere behave.
SHIM = """
import * as real from './node_modules/@playwright/test/index.mjs';

export * from './node_modules/@playwright/test/index.mjs';
const noop = new Proxy(function () {}, { get: (_t, p) => (p === 'then' ? undefined : noop), apply: () => noop });
export const expect = (...args) => {
  let file = '';
  try { file = real.test.info().file; } catch (e) {}
  return file.endsWith('items.spec.js') ? noop : real.expect(...args);
};
export default real.default;
"""
MAPS = '{"compilerOptions": {"paths": {"@playwright/test": ["./pw-shim.mjs"]}}}\n'


def _dev_server(task: Task, code: str) -> str:
    vite = task.base_file("frontend/vite.config.js")
    return edit("frontend/vite.config.js", vite, code + "\n" + vite)


@pytest.mark.parametrize("which", ["frontend", "fullstack"])
def test_a_tsconfig_that_extends_a_path_without_a_dot_is_followed_as_playwright_does(
    frontend, fullstack, tmp_path, no_validator, which
):
    """Class 5/6: jsconfig.json `"extends": "pw-base"` (no leading dot: Playwright looks in the folder, then in
    node_modules), and pw-base.json maps @playwright/test to a shim: the protection resolves `extends` as
    Playwright does, sees the mapping, restores the files: patch_touches_tests."""
    task = frontend if which == "frontend" else fullstack
    patch = (
        new("frontend/jsconfig.json", '{"extends": "pw-base"}\n')
        + new("frontend/pw-base.json", MAPS)
        + new("frontend/pw-shim.mjs", SHIM)
    )
    v = task.score(patch, tmp_path / which)
    assert not v.resolved and v.frontend_status == "patch_touches_tests", said(v)
    assert "maps the installed package '@playwright/test'" in v.note, said(v)


NODE_MODULES_AT_RUN_TIME = """
import pbenchFs from 'node:fs';
import pbenchPath from 'node:path';

const pbenchRoot = pbenchPath.dirname(new URL(import.meta.url).pathname);
try {
  const kit = pbenchPath.join(pbenchRoot, 'node_modules', 'pbench-kit');
  pbenchFs.mkdirSync(kit, { recursive: true });
  pbenchFs.writeFileSync(pbenchPath.join(kit, 'tsconfig.json'), JSON.stringify({ compilerOptions: { baseUrl: pbenchRoot, paths: { '@playwright/test': [pbenchPath.join(pbenchRoot, 'pw-shim.mjs')] } } }));
  console.log('hostile: did write node_modules/pbench-kit');
} catch (e) { console.log(`hostile: could not write node_modules/pbench-kit ${e.code}`); }
"""


@pytest.mark.parametrize("which", ["frontend", "fullstack"])
def test_a_tsconfig_extended_from_node_modules_written_at_run_time(
    frontend, fullstack, tmp_path, no_validator, which
):
    """Class 5, the variant: jsconfig.json extends `pbench-kit/tsconfig.json`, which does not exist when the
    patch is applied; the dev server writes it into the image's node_modules at run time. The protection refuses
    an `extends` that resolves to nothing yet; the watch names the package created in node_modules; the specs
    compile with the harness's tsconfig anyway."""
    task = frontend if which == "frontend" else fullstack
    patch = (
        new("frontend/jsconfig.json", '{"extends": "pbench-kit/tsconfig.json"}\n')
        + new("frontend/pw-shim.mjs", SHIM)
        + _dev_server(task, NODE_MODULES_AT_RUN_TIME)
    )
    v = task.score(patch, tmp_path / which)
    assert not v.resolved and v.frontend_status == "patch_touches_tests", said(v)
    assert "which does not exist" in v.note, said(v)
    assert any("pbench-kit" in t and "node_modules" in t for t in v.tampering), said(v)


WRITE_JSCONFIG = """
import pbenchFs from 'node:fs';
import pbenchPath from 'node:path';

const pbenchRoot = pbenchPath.dirname(new URL(import.meta.url).pathname);
pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, 'pw-shim.mjs'), SHIM);
pbenchFs.writeFileSync(pbenchPath.join(pbenchRoot, 'jsconfig.json'), MAPS);
"""


@pytest.mark.parametrize("which", ["frontend", "fullstack"])
def test_a_spec_forger_by_file_flips_the_witness_in_the_hidden_spec(
    frontend, fullstack, tmp_path, monkeypatch, which
):
    """Class 1, frontend form, with the harness's tsconfig switched off (what is left when a redirect gets past
    it): the dev server writes a jsconfig mapping @playwright/test to a shim that fakes `expect` for the hidden
    spec only. The witnesses live in that spec: the must-fail one passes and is caught (and the watch names the
    jsconfig that appeared)."""
    from tasks_lib.engine import jobs

    real = jobs.frontend_job

    def without_tsconfig(*a, **k):
        job = real(*a, **k)
        job["frontend"]["harness_tsconfig"] = False
        return job

    monkeypatch.setattr(jobs, "frontend_job", without_tsconfig)
    task = frontend if which == "frontend" else fullstack
    code = f"const SHIM = {SHIM!r};\nconst MAPS = {MAPS!r};\n" + WRITE_JSCONFIG
    v = task.score(_dev_server(task, code), tmp_path / which)
    assert not v.resolved, said(v)
    assert _witness_caught(v), said(v)
    assert any("frontend/jsconfig.json" in t for t in v.tampering), said(v)
