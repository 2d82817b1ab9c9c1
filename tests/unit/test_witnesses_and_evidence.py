"""Round 3 of the judge, unit level: witnesses, the evidence channel and its cross-check, configs read the way the
tools read them (containers/runner/pbench_witness.py, pbench_configs.py, pbench_tsconfig.py; tasks_lib/formats/evidence.py,
tasks_lib/engine/witnesses.py). The Docker-backed attacks are tests/integration/test_judge_round3.py."""

from __future__ import annotations

import ast
import importlib
import json
import random
import sys

import pytest

from tasks_lib.core.constants import Outcome
from tasks_lib.engine import runners, witnesses
from tasks_lib.formats import evidence


@pytest.fixture(scope="module")
def runner_modules(runner_import):
    return {n: runner_import(n) for n in ("pbench_witness", "pbench_configs", "pbench_tsconfig")}


TESTS = '''import pytest

API = "/api/v1/items"


def helper(client):
    return client


@pytest.mark.parametrize("title", ["a", "b"])
def test_create_item(client, title) -> None:
    r = client.post(API, json={"title": title})
    assert r.status_code == 200


class TestArchive:
    def test_archive_item(self, client):
        assert client.post(f"{API}/1/archive").status_code == 404


def test_read_item_not_found(client, db):
    """Reads a missing item."""
    assert client.get(f"{API}/999").json() == {"detail": "Item not found"}
'''


def _functions(text: str) -> dict[str, ast.AST]:
    tree = ast.parse(text)
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        if isinstance(node, ast.ClassDef):
            out |= {f"{node.name}::{sub.name}": sub for sub in node.body if isinstance(sub, ast.FunctionDef)}
    return out


@pytest.mark.parametrize("seed", range(12))
def test_pytest_witnesses_are_shaped_like_the_models_and_keep_the_file_valid(runner_modules, seed):
    """Rule: one must-fail and one must-pass witness, each in a graded test's place (same class), with its
    decorators and parameters, named from the file's words, never an existing name; the file still parses and
    every original test is unchanged; running the witnesses' bodies gives the expected outcomes."""
    w = runner_modules["pbench_witness"]
    models = ["test_create_item", "TestArchive::test_archive_item", "test_read_item_not_found"]
    new_text, found = w.plan_pytest(TESTS, models, random.Random(seed))
    assert sorted(x["expect"] for x in found) == ["failed", "passed"]
    before, after = _functions(TESTS), _functions(new_text)
    for name, node in before.items():
        assert ast.dump(after[name]) == ast.dump(node)
    for x in found:
        key = f"{x['cls']}::{x['name']}" if x["cls"] else x["name"]
        assert key in after and key not in before and x["name"].startswith("test_")
        fn = after[key]
        params = [a.arg for a in fn.args.args]
        assert params in (["client", "title"], ["self", "client"], ["client", "db"])
        body = ast.Module(body=[s for s in fn.body], type_ignores=[])
        code = compile(ast.fix_missing_locations(body), "<w>", "exec")
        ns = {"self": None, "client": None, "title": None, "db": None}
        if x["expect"] == "passed":
            exec(code, ns)
        else:
            with pytest.raises(AssertionError):
                exec(code, ns)


def test_no_usable_model_means_no_witness(runner_modules):
    """Rule: a file without a test def whose body starts on its own line gets no witness (the runner then
    writes none into it), and a file that does not parse is left alone."""
    w = runner_modules["pbench_witness"]
    assert w.plan_pytest("def test_x(): pass\n", ["test_x"], random.Random(1)) == ("def test_x(): pass\n", [])
    assert w.plan_pytest("def broken(:\n", [], random.Random(1))[1] == []


SPEC = """import { test, expect } from '@playwright/test';

test.describe('Items', () => {
  test('creating an item shows it in the list', async ({ page }) => {
    await page.goto('/');
    await expect(page.getByText('x')).toBeVisible();
  });

  test('deleting an item removes it', async ({ page }) => {
    await page.goto('/');
  });
});
"""


@pytest.mark.parametrize("seed", range(8))
def test_spec_witnesses_sit_beside_a_graded_test_and_shift_the_lines_below(runner_modules, seed):
    """Rule: Playwright witnesses go into the spec before a graded test, at its indentation and with its
    fixtures; their `line` is where their `test(` is in the new text, and `shift_line` maps every old line
    to where it is now; the host's `unshift` maps report ids back."""
    w = runner_modules["pbench_witness"]
    new_text, found = w.plan_spec(SPEC, [4, 9], random.Random(seed))
    lines = new_text.splitlines()
    assert sorted(x["expect"] for x in found) == ["failed", "passed"]
    for x in found:
        assert lines[x["line"] - 1].strip().startswith("test(") and "async ({ page })" in lines[x["line"] - 1]
        assert x["name"] in lines[x["line"] - 1]
    old = SPEC.splitlines()
    for i, text in enumerate(old, start=1):
        assert lines[w.shift_line(i, found) - 1] == text
    ws = [
        witnesses.Witness("tests/items.spec.js", x["name"], Outcome(x["expect"]), "", x["line"], x["lines"])
        for x in found
    ]
    moved = w.shift_line(9, found)
    assert witnesses.unshift(f"tests/items.spec.js:{moved}:3 › Items › deleting an item removes it", ws) == (
        "tests/items.spec.js:9:3 › Items › deleting an item removes it"
    )


def test_a_serial_spec_gets_its_witnesses_at_the_end_must_fail_last(runner_modules):
    """Rule: in a spec that runs serially a failing test skips the ones after it: the witnesses go to the end
    of the file at the top level, the must-pass one first, and no line of the spec moves."""
    w = runner_modules["pbench_witness"]
    serial = SPEC.replace("test.describe('Items'", "test.describe.serial('Items'")
    new_text, found = w.plan_spec(serial, [4, 9], random.Random(3))
    assert new_text.startswith(serial) and [x["expect"] for x in found] == ["passed", "failed"]
    lines = new_text.splitlines()
    assert all(lines[x["line"] - 1].startswith("test(") for x in found)
    assert found[0]["line"] < found[1]["line"] and all(w.shift_line(i, found) == i for i in range(1, 13))


def test_witness_check_takes_witnesses_out_and_judges_them():
    """Rule: witnesses leave the outcomes; a must-fail witness that passed (or is missing from a report with
    tests) is tampering; a must-pass one that failed is a doubt (tampering only against a pass)."""
    ws = [
        witnesses.Witness("tests/test_a.py", "test_b_c", Outcome.FAILED),
        witnesses.Witness("tests/test_a.py", "test_d", Outcome.PASSED, cls="TestX"),
    ]
    tests = {
        "tests/test_a.py::test_b_c[1]": Outcome.PASSED,
        "tests/test_a.py::TestX::test_d": Outcome.FAILED,
        "tests/test_a.py::test_real": Outcome.PASSED,
    }
    rest, hard, soft = witnesses.check(ws, tests, suite_ran=True)
    assert rest == {"tests/test_a.py::test_real": Outcome.PASSED}
    assert hard and "test_b_c" in hard[0] and "must fail" in hard[0]
    assert soft and "test_d" in soft[0]
    rest, hard, _ = witnesses.check(ws, {"tests/test_a.py::test_real": Outcome.PASSED}, suite_ran=True)
    assert len(hard) == 2 and all("missing" in h for h in hard)
    # A file that failed to collect runs none of its tests, witnesses included: nothing to say of them.
    real = {"tests/test_b.py::test_real": Outcome.PASSED}
    assert witnesses.check(ws, real, suite_ran=True, collection_errors=["tests/test_a.py"])[1] == []
    # Skipped with everything else (a failed setup project): a doubt; skipped while others passed: forged.
    skipped = {"tests/test_a.py::test_b_c": Outcome.SKIPPED, "tests/test_a.py::test_real": Outcome.SKIPPED}
    _, hard, soft = witnesses.check(ws[:1], skipped, suite_ran=True)
    assert hard == [] and "skipped" in soft[0]
    _, hard, _ = witnesses.check(
        ws[:1], {**skipped, "tests/test_a.py::test_real": Outcome.PASSED}, suite_ran=True
    )
    assert "skipped" in hard[0]


def test_a_witness_of_a_parametrized_class_is_judged_by_the_parameters_that_ran():
    """Rule (a false tampering seen on mcp-context-forge #3803's gold patch): in a class whose fixture runs
    each test under `[python]` and `[rust]` and skips `[rust]` for all of them, a witness shaped like its tests
    runs twice too; the `[rust]` instance skipped like its siblings ran nothing, and is not judged. A skip of the
    witness alone, a pass, or every instance skipped is judged as before."""
    f, cls = "tests/test_pii.py", "TestDetector"
    ws = [
        witnesses.Witness(f, "test_a_b", Outcome.FAILED, cls=cls),
        witnesses.Witness(f, "test_c_d", Outcome.PASSED, cls=cls),
    ]
    siblings = {
        f"{f}::{cls}::test_real[python]": Outcome.PASSED,
        f"{f}::{cls}::test_real[rust]": Outcome.SKIPPED,
    }

    def report(fail_rust: Outcome, pass_python: Outcome, fail_python: Outcome = Outcome.FAILED) -> dict:
        return {
            **siblings,
            f"{f}::{cls}::test_a_b[python]": fail_python,
            f"{f}::{cls}::test_a_b[rust]": fail_rust,
            f"{f}::{cls}::test_c_d[python]": pass_python,
            f"{f}::{cls}::test_c_d[rust]": Outcome.SKIPPED,
        }

    rest, hard, soft = witnesses.check(ws, report(Outcome.SKIPPED, Outcome.PASSED), suite_ran=True)
    assert (rest, hard, soft) == (siblings, [], [])
    # The must-fail witness passed under the parameter that ran: forged; the skipped one beside it changes
    # nothing.
    _, hard, _ = witnesses.check(
        ws, report(Outcome.SKIPPED, Outcome.PASSED, fail_python=Outcome.PASSED), suite_ran=True
    )
    assert len(hard) == 1 and "test_a_b" in hard[0]
    # Skipped under a parameter its siblings ran with: judged, forged.
    alone = {**report(Outcome.SKIPPED, Outcome.PASSED), f"{f}::{cls}::test_real[rust]": Outcome.PASSED}
    _, hard, _ = witnesses.check(ws, alone, suite_ran=True)
    assert len(hard) == 1 and "skipped" in hard[0]
    # Every instance skipped while the siblings passed: forged, as for an unparametrized witness.
    everything = report(Outcome.SKIPPED, Outcome.PASSED, fail_python=Outcome.SKIPPED)
    _, hard, _ = witnesses.check(ws, everything, suite_ran=True)
    assert len(hard) == 1 and "test_a_b" in hard[0]
    # The must-pass witness failed under the parameter that ran: a doubt, as before.
    _, hard, soft = witnesses.check(ws, report(Outcome.SKIPPED, Outcome.FAILED), suite_ran=True)
    assert hard == [] and len(soft) == 1 and "test_c_d" in soft[0]


def test_a_module_level_witness_is_judged_by_the_parameters_that_ran_in_its_module():
    """Rule: the same at module level (a module-level `params` fixture): the siblings are the file's tests
    outside any class; a class's skips say nothing of a module-level witness."""
    f = "tests/test_pii.py"
    ws = [witnesses.Witness(f, "test_a_b", Outcome.FAILED)]
    report = {
        f"{f}::test_real[python]": Outcome.PASSED,
        f"{f}::test_real[rust]": Outcome.SKIPPED,
        f"{f}::test_a_b[python]": Outcome.FAILED,
        f"{f}::test_a_b[rust]": Outcome.SKIPPED,
    }
    assert witnesses.check(ws, report, suite_ran=True)[1:] == ([], [])
    in_a_class = {
        f"{f}::test_real[python]": Outcome.PASSED,
        f"{f}::TestX::test_real[rust]": Outcome.SKIPPED,
        f"{f}::test_a_b[python]": Outcome.FAILED,
        f"{f}::test_a_b[rust]": Outcome.SKIPPED,
    }
    _, hard, _ = witnesses.check(ws, in_a_class, suite_ran=True)
    assert len(hard) == 1 and "skipped" in hard[0]


def test_job_spec_groups_the_graded_tests_by_file():
    """Rule: the job names each graded file with its models (pytest: names without parameters; Playwright:
    the lines where the tests start)."""
    spec = witnesses.job_spec(
        ["tests/a.py::test_x[1]", "tests/a.py::TestY::test_z", "tests/b.py::test_q"], runners.get("pytest")
    )
    assert spec == {
        "runner": "pytest",
        "files": {"tests/a.py": ["TestY::test_z", "test_x"], "tests/b.py": ["test_q"]},
    }
    pw = witnesses.job_spec(
        ["tests/i.spec.js:9:3 › Items › x", "tests/i.spec.js:4:3 › Items › y"], runners.get("playwright")
    )
    assert pw == {"runner": "playwright", "files": {"tests/i.spec.js": [4, 9]}}


# ----------------------------------------------------------------------------- the evidence channel

PID = 41


def _log(*messages, pid=PID) -> str:
    return "".join(f"{pid}\t{m}\n" for m in messages)


GOOD = [
    "S\t41",
    "V\t0\tshort",
    "T\ttests/t.py::test_a\tsetup\tpassed\t0",
    "T\ttests/t.py::test_a\tcall\tpassed\t0",
    "T\ttests/t.py::test_a\tteardown\tpassed\t0",
    "T\ttests/t.py::test_b\tsetup\tpassed\t0",
    "T\ttests/t.py::test_b\tcall\tfailed\t0",
    "T\ttests/t.py::test_b\tteardown\tpassed\t0",
    "T\ttests/t.py::test_x\tsetup\tpassed\t0",
    "T\ttests/t.py::test_x\tcall\tskipped\t1",
    "T\ttests/t.py::test_x\tteardown\tpassed\t0",
    "E\t9",
]
LOG = """
=================================== FAILURES ===================================
_ test_b _
tests/t.py:5: in test_b
    assert 1 == 2
E   assert 1 == 2
=========================== short test summary info ============================
PASSED tests/t.py::test_a
FAILED tests/t.py::test_b - assert 1 == 2
XFAIL tests/t.py::test_x
==================== 1 failed, 1 passed, 1 xfailed in 0.12s ====================
"""
JUNIT = {
    "tests/t.py::test_a": Outcome.PASSED,
    "tests/t.py::test_b": Outcome.FAILED,
    "tests/t.py::test_x": Outcome.XFAILED,
}


def test_an_honest_run_agrees_with_its_channel():
    """Rule: the outcomes, the final count line and the FAILURES section of an honest run all agree with the
    reports that left through the channel: no problem."""
    ch = evidence.read_channel(_log(*GOOD), PID)
    assert evidence.outcomes(ch) == JUNIT
    assert evidence.cross_check(ch, junit=JUNIT, junit_collection_errors=[], log=LOG) == []


@pytest.mark.parametrize(
    ("name", "junit", "log", "channel", "needle"),
    [
        (
            "junit rewritten",
            {**JUNIT, "tests/t.py::test_b": Outcome.PASSED},
            LOG,
            GOOD,
            "failed as the tests ran, passed in the JUnit",
        ),
        (
            "count line",
            JUNIT,
            LOG.replace("1 failed, 1 passed", "2 passed"),
            GOOD,
            "final count line disagrees",
        ),
        (
            "failures section",
            JUNIT,
            LOG.replace("_ test_b _", "_ other _"),
            GOOD,
            "FAILURES section disagrees",
        ),
        ("no end", JUNIT, LOG, GOOD[:-1], "ended before the launcher's end message"),
        ("count of messages", JUNIT, LOG, [*GOOD[:-1], "E\t12"], "sent 12 report message(s)"),
        ("no count line", JUNIT, LOG.replace("in 0.12s", "in"), GOOD, "no final count line"),
    ],
)
def test_every_record_that_disagrees_with_the_channel_is_named(name, junit, log, channel, needle):
    """Rule: a JUnit report rewritten at exit, a count line or FAILURES section that does not match the reports
    as they ran, a channel that ended early or holds other numbers than its end message: each is named."""
    ch = evidence.read_channel(_log(*channel), PID)
    problems = evidence.cross_check(ch, junit=junit, junit_collection_errors=[], log=log)
    assert any(needle in p for p in problems), (name, problems)


def test_messages_from_another_process_are_foreign():
    """Rule: only the launcher's process id counts (the kernel attaches it); a forked child's messages, or any
    after the end message, are named."""
    text = _log(*GOOD) + _log("T\ttests/t.py::test_b\tcall\tpassed\t0", pid=77)
    ch = evidence.read_channel(text, PID)
    assert evidence.outcomes(ch)["tests/t.py::test_b"] is Outcome.FAILED
    problems = evidence.cross_check(ch, junit=JUNIT, junit_collection_errors=[], log=LOG)
    assert any("from another process" in p for p in problems)


def test_quiet_runs_have_an_undecorated_or_no_count_line():
    """Rule: -q prints the count line without its rule of '=', -qq prints none: the channel says which."""
    quiet = LOG.replace(
        "==================== 1 failed, 1 passed, 1 xfailed in 0.12s ====================",
        "1 failed, 1 passed, 1 xfailed in 0.12s",
    )
    ch = evidence.read_channel(_log(*[("V\t-1\tshort" if m.startswith("V") else m) for m in GOOD]), PID)
    assert evidence.cross_check(ch, junit=JUNIT, junit_collection_errors=[], log=quiet) == []
    ch = evidence.read_channel(_log(*[("V\t-2\tshort" if m.startswith("V") else m) for m in GOOD]), PID)
    assert (
        evidence.cross_check(
            ch,
            junit=JUNIT,
            junit_collection_errors=[],
            log=quiet.replace("1 failed, 1 passed, 1 xfailed in 0.12s", ""),
        )
        == []
    )


# ----------------------------------------------------------------------------- configs as the tools read them


@pytest.mark.parametrize(
    ("text", "section"),
    [
        ("[tool:pytest]\naddopts = -p x\n", {"addopts": "-p x"}),
        ("[tool:pytest] ; note\naddopts = -p x\n", {"addopts": "-p x"}),
        ("[flake8]\nmax-line-length = 100\n", None),
    ],
)
def test_ini_sections_as_pytest_reads_them(runner_modules, text, section):
    """Rule: setup.cfg's [tool:pytest] as pytest (iniconfig) reads it, trailing comments on headers included."""
    assert runner_modules["pbench_configs"].ini_section(text, "tool:pytest") == section


@pytest.mark.parametrize(
    "text",
    [
        "[tool:pytest] # ]\naddopts = -p x\n",  # iniconfig: [tool:pytest]; configparser: "tool:pytest] # "
        "[tool:pytest]\naddopts = -p x\n[tool:pytest]\naddopts = -q\n",  # a duplicate section
        "addopts = -p x\n",  # no section header
    ],
)
def test_ini_text_read_differently_or_not_at_all_fails_closed(runner_modules, text):
    """Rule: a file that pytest's reader and the standard library read differently, or that pytest's reader
    refuses, raises: the protection counts it as changed."""
    configs = runner_modules["pbench_configs"]
    with pytest.raises(configs.ParseError):
        configs.ini_section(text, "tool:pytest")


def test_tsconfig_extends_and_references_are_followed_as_playwright_does(runner_modules, tmp_path):
    """Rule: `extends` without a leading dot is the folder's file first, then a package in node_modules (its
    package.json `tsconfig` field); references are loaded after; a file that does not exist is named."""
    configs = runner_modules["pbench_configs"]
    (tmp_path / "node_modules" / "kit").mkdir(parents=True)
    (tmp_path / "node_modules" / "kit" / "package.json").write_text('{"tsconfig": "conf/ts.json"}')
    (tmp_path / "node_modules" / "kit" / "conf").mkdir()
    (tmp_path / "node_modules" / "kit" / "conf" / "ts.json").write_text(
        '{"compilerOptions": {"allowJs": true}}'
    )
    (tmp_path / "base.json").write_text(
        '{"extends": "kit", "compilerOptions": {"paths": {"@x/*": ["./x/*"]}}}'
    )
    (tmp_path / "app.json").write_text('{"compilerOptions": {"baseUrl": "src"}}')
    (tmp_path / "tsconfig.json").write_text(
        '{"extends": ["base"], "references": [{"path": "./app"}, {"path": "./gone"}], // comment\n}'
    )

    def read(p):
        return open(p).read()

    import os

    main, app, gone = configs.load_tsconfig(str(tmp_path / "tsconfig.json"), read, os.path.exists)
    assert main["allowJs"] is True and main["paths"]["mapping"] == {"@x/*": ["./x/*"]}
    assert app["baseUrl"] == str(tmp_path / "src")
    assert gone["missing"] == [str(tmp_path / "gone.json")]


def test_the_harness_tsconfig_drops_captures_and_pins_the_base_url(runner_modules, tmp_path):
    """Rule: from the base config, a paths key that captures an installed package is dropped, values become
    absolute, and a baseUrl becomes one mapping per entry its folder holds (none named like a package)."""
    ts = runner_modules["pbench_tsconfig"]
    (tmp_path / "src" / "api").mkdir(parents=True)
    (tmp_path / "src" / "utils.ts").write_text("")
    (tmp_path / "src" / "react").mkdir()
    config = {
        "path": str(tmp_path / "tsconfig.json"),
        "baseUrl": str(tmp_path / "src"),
        "paths": {"mapping": {"@playwright/test": ["./shim"], "@/*": ["./*"]}, "base": str(tmp_path)},
        "missing": [],
        "errors": [],
    }
    dropped: list[str] = []
    got = ts._mapping(config, {"@playwright/test", "@playwright", "react"}, dropped)
    assert "@playwright/test" not in got and any("@playwright/test" in d for d in dropped)
    assert got["@/*"] == [str(tmp_path / "src" / "*")]
    assert got["api"] == [str(tmp_path / "src" / "api")] and got["api/*"] == [
        str(tmp_path / "src" / "api" / "*")
    ]
    assert got["utils"] == [str(tmp_path / "src" / "utils")] and "react" not in got
    json.dumps(got)


# ----------------------------------------------------------------------------- the launcher's audit


def test_strict_identity_sees_a_replacement_that_declares_the_original_as_wrapped(runner_import):
    """Rule: a reporting function replaced by a wrapper whose __wrapped__ is the original is a replacement; a
    property made of functions captured from the image (pytest's legacypath) is not; the original back is not."""
    import functools

    import _pytest.config as config_module
    import _pytest.reports as reports

    audit = runner_import("pbench_audit")
    snapshot = audit.ImageSnapshot(
        [m for n, m in list(sys.modules.items()) if n.startswith(("_pytest", "pluggy"))]
    )
    original = reports.TestReport.__dict__["from_item_and_call"]
    try:

        @functools.wraps(original.__func__)
        def forged(cls, item, call):
            return original.__func__(cls, item, call)

        forged.__wrapped__ = original.__func__
        reports.TestReport.from_item_and_call = classmethod(forged)
        found = audit.changed_identities(snapshot)
        assert any("_pytest.reports.TestReport.from_item_and_call was replaced" in f for f in found)
    finally:
        reports.TestReport.from_item_and_call = original
    assert audit.changed_identities(snapshot) == []
    legacy = importlib.import_module("_pytest.legacypath")
    saved = config_module.Config.__dict__.get("rootdir")
    try:
        config_module.Config.rootdir = property(legacy.Config_rootdir)
        assert audit.changed_identities(snapshot) == []
    finally:
        if saved is None:
            del config_module.Config.rootdir
        else:
            config_module.Config.rootdir = saved


def test_the_code_that_ran_is_compared_with_the_files_bytes(runner_import, tmp_path):
    """Rule: a code object compiled from a file's text matches it; one compiled from other text under the
    same file name (or rewritten bytecode of it) does not."""
    audit = runner_import("pbench_audit")
    path = tmp_path / "test_x.py"
    path.write_text("def test_x():\n    assert 1 == 2\n")
    source = audit.SourceCode(rewrite=None)

    def fn_code(text):
        top = compile(text, str(path), "exec", dont_inherit=True)
        return next(c for c in top.co_consts if hasattr(c, "co_code"))

    assert source.matches(fn_code(path.read_text()), str(path))
    assert not source.matches(fn_code("def test_x():\n    assert True or 1 == 2\n"), str(path))


def test_a_package_json_named_like_an_installed_package_is_protected(runner_import, tmp_path):
    """Rule: Node resolves a package's own name to itself (its "exports") before node_modules: a package.json
    the patch names like an installed package is restored; another name is the agent's to choose."""
    rules = runner_import("pbench_rules")
    (tmp_path / "package.json").write_text('{"name": "@playwright/test", "exports": {".": "./shim.mjs"}}')
    assert "self-reference" in rules._self_reference(tmp_path / "package.json", {"@playwright/test", "react"})
    (tmp_path / "package.json").write_text('{"name": "frontend", "dependencies": {"react": "19"}}')
    assert rules._self_reference(tmp_path / "package.json", {"@playwright/test", "react"}) is None


@pytest.mark.parametrize("foreign", [False, True])
def test_a_test_process_killed_before_its_report_is_a_crash_not_tampering(tmp_path, foreign):
    """Rule: a test process that dies before writing its JUnit report (killed: out of memory, the suite's own
    crash) leaves a channel that stops early, tests that are in no report, and nothing that can pass; that is
    the crash, named in the run's error with the signal, not tampering. What no honest run puts on the channel
    (a message from another process) still is."""
    from tasks_lib.core.constants import RunStatus
    from tasks_lib.engine import results
    from tasks_lib.engine.records import RunResult
    from tasks_lib.protocol import wire

    messages = GOOD[:5] + (["X\tforged"] if foreign else [])
    text = _log(*messages)
    if foreign:
        text += f"{PID + 1}\tT\ttests/t.py::test_b\tcall\tpassed\t0\n"
    (tmp_path / "evidence.log").write_text(text)
    wire.write_result(tmp_path, {"status": "completed", "test": {"exit_code": -9, "pid": PID}})
    result = RunResult(RunStatus.INFRA_ERROR)
    results.read_pytest(result, tmp_path, runner_exit=0)
    assert result.status == RunStatus.COMPLETED and result.tests == {}
    assert "killed by SIGKILL before it wrote its report" in (result.error or "")
    if foreign:
        assert any("from another process" in t for t in result.tampering), result.tampering
    else:
        assert result.tampering == [], result.tampering


def test_the_runners_references_stand_for_a_compile_only_when_equal(runner_import, tmp_path):
    """Rule: the reference code the runner had compiled beside the tests (pbench_refs.py, as the tool user, in a
    folder only that user may write) spares the audit its own rewrite when a function equals it; code that
    differs from it is still compared with what the audit compiles itself from the file's bytes."""
    import marshal

    audit = runner_import("pbench_audit")
    refs_tool = runner_import("pbench_refs")
    path = tmp_path / "test_x.py"
    path.write_text("def test_x():\n    assert 1 == 2\n")
    folder = tmp_path / "refs"
    folder.mkdir()
    missing = str(tmp_path / "missing.py")
    assert refs_tool.main([str(folder), str(path), missing]) == 0
    written = {p.name for p in folder.iterdir()}
    assert written == {"manifest.json", "done", refs_tool.ref_name(str(path))}  # what failed is left out
    assert audit.References(str(folder), None).get(missing) is None

    compiled = []

    def rewrite(p, config):
        from _pytest.assertion.rewrite import _rewrite_test

        compiled.append(p)
        return _rewrite_test(p, config)

    def source_with(references):
        source = audit.SourceCode(rewrite, references)
        source.config = type("Config", (), {"getini": lambda self, name: False})()
        return source

    top = marshal.loads((folder / refs_tool.ref_name(str(path))).read_bytes())
    test_code = next(c for c in top.co_consts if hasattr(c, "co_code"))
    source = source_with(audit.References(str(folder), None))
    assert source.matches(test_code, str(path)) and compiled == []  # the reference was enough

    foreign = compile("def test_x():\n    assert True\n", str(path), "exec", dont_inherit=True)
    foreign_fn = next(c for c in foreign.co_consts if hasattr(c, "co_code"))
    assert not source.matches(foreign_fn, str(path)) and compiled  # compared with the audit's own compile too
    # With an assertion pass hook the references (rewritten without it) are not used at all.
    hooked = audit.SourceCode(rewrite, audit.References(str(folder), None))
    hooked.config = type("Config", (), {"getini": lambda self, name: True})()
    assert hooked._index(str(path), "reference") == {}


def test_reference_files_are_the_selected_tests_and_their_conftests(runner_import, tmp_path):
    runner = runner_import("pbench_runner")
    protected = {
        "conftest.py",
        "backend/tests/conftest.py",
        "backend/tests/api/test_a.py",
        "backend/app/x.py",
    }
    files = runner.reference_files(
        tmp_path,
        tmp_path / "backend",
        ["tests/api/test_a.py::test_one", "../outside.py", "tests/api/b.txt"],
        protected,
    )
    assert files == [
        str(tmp_path / r) for r in ("conftest.py", "backend/tests/conftest.py", "backend/tests/api/test_a.py")
    ]


def test_the_launcher_waits_only_for_a_module_it_needs_that_the_references_will_hold(runner_import, tmp_path):
    """Rule: each module's reference is taken as soon as it is written, while the producer goes on with the
    others; a file the producer's manifest does not name is never waited for (the audit compiles it itself)."""
    import json
    import marshal
    import os
    import time

    audit = runner_import("pbench_audit")
    refs_tool = runner_import("pbench_refs")
    first, second = str(tmp_path / "test_a.py"), str(tmp_path / "test_b.py")
    (tmp_path / "manifest.json").write_text(json.dumps([first, second]))
    code = compile("def test_a():\n    pass\n", first, "exec")
    (tmp_path / refs_tool.ref_name(first)).write_bytes(marshal.dumps(code))
    running = audit.References(str(tmp_path), str(os.getpid()), wait_s=30)  # its producer still runs
    start = time.monotonic()
    assert running.get(first) == code and running.get(str(tmp_path / "other.py")) is None
    assert time.monotonic() - start < 5
    (tmp_path / "done").write_bytes(b"")  # the producer gave up on the second module
    assert running.get(second) is None and time.monotonic() - start < 5


def test_references_are_waited_for_only_while_their_producer_runs(runner_import, tmp_path):
    """The launcher stops waiting for the references when their producer has exited without writing them."""
    import time

    audit = runner_import("pbench_audit")
    dead = audit.References(str(tmp_path), "999999999", wait_s=30)
    start = time.monotonic()
    assert dead.get(str(tmp_path / "test_x.py")) is None and time.monotonic() - start < 5
    assert audit.References(None, None).get("x") is None
