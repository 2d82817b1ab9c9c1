"""tasks_lib.formats.playwright_report against JSON reports written by REAL Playwright runs.

The fixtures in tests/fixtures/playwright/ come from tests/fixtures/playwright/regenerate.sh, which runs the
fixture app (tests/fixtures/playwright/frontend: React + Vite, three spec files, a setup project, a
mobile project and a firefox project the injected config drops) with Playwright 1.65 and Debian's
Chromium, inside a container of the frontend environment image with --network none, through the
harness's own scripts (containers/frontend/pbench-playwright.sh and playwright.pbench.config.mjs).
The spec files are .ts, so the outer pytest run never collects anything there.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tasks_lib.core.constants import Outcome
from tasks_lib.formats.junit import MESSAGE_LIMIT, JUnitReport
from tasks_lib.formats.playwright_report import (
    LOAD_ERROR_ID,
    LOAD_ERRORS_REPORT_NAME,
    REPORT_NAME,
    PlaywrightReport,
    error_file,
    file_of,
    is_playwright_id,
    make_test_id,
    parse_playwright_file,
    parse_playwright_json,
    parse_playwright_out,
    selection_args,
    with_load_errors,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "playwright"
FRONTEND_IN_CONTAINER = "/work/repo/frontend"

P, F, S, XF = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED, Outcome.XFAILED

# Every test of the `main` run (retries 0, as the harness runs), in report order, with its outcome.
EXPECTED_MAIN: dict[str, Outcome] = {
    "tests/auth.setup.ts:5:1 › sign in": P,
    "tests/home.spec.ts:3:1 › has a title": P,
    "tests/home.spec.ts:8:1 › shows the heading": P,
    "tests/home.spec.ts:14:1 › is wide enough": F,  # passes on chromium, fails on mobile
    "tests/home.spec.ts:19:1 › flaky on first try": F,  # no retry: its only attempt fails
    "tests/home.spec.ts:25:3 › inside an anonymous describe": P,
    "tests/home.spec.ts:32:3 › wizard › step one": F,
    "tests/home.spec.ts:37:3 › wizard › step two": S,  # serial group: skipped after step one failed
    "tests/items.spec.ts:8:3 › Items › lists the items": P,
    "tests/items.spec.ts:12:3 › Items › archive button": P,
    "tests/items.spec.ts:19:3 › Items › restore button": F,
    "tests/items.spec.ts:31:8 › Items › exports to CSV": S,  # test.skip(title, fn)
    "tests/items.spec.ts:35:8 › Items › bulk archive": S,  # test.fixme(title, fn)
    "tests/items.spec.ts:39:3 › Items › skips itself on chromium": S,  # test.skip(cond) inside the test
    "tests/items.spec.ts:43:3 › Items › known bug": XF,  # test.fail() that fails
    "tests/items.spec.ts:48:3 › Items › fixed bug": F,  # test.fail() that passes
    "tests/items.spec.ts:53:3 › Items › slow search": F,  # timedOut
    "tests/items.spec.ts:26:5 › Items › when signed in › greets the user": P,
}


def _load(name: str) -> PlaywrightReport:
    return parse_playwright_file(FIXTURES / f"{name}.json")


def _raw(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def main() -> PlaywrightReport:
    return _load("main")


# ------------------------------------------------------------------------------------------- main run


def test_main_ids_and_outcomes_are_exact(main):
    """Every test gets PrototypeBench's id (frontend-relative file:line:column › describes › title) and
    the outcome rules of the module docstring; nothing else appears."""
    assert main.tests == EXPECTED_MAIN
    assert list(main.tests) == list(EXPECTED_MAIN)
    assert main.collection_errors == ()
    assert main.flaky == ()
    assert main.not_run == ("tests/home.spec.ts:37:3 › wizard › step two",)
    assert main.timed_out is False
    assert main.version == "1.65.1"


def test_ids_are_the_titles_playwright_itself_lists(main):
    """The id is what `playwright test --list` prints without the "[project] › " prefix, the path made
    relative to the frontend dir (Playwright lists it relative to testDir, here frontend/tests)."""
    listed = set()
    for line in (FIXTURES / "main.list.txt").read_text().splitlines():
        match = re.match(r"^\s+\[[^\]]+\] › (.+)$", line)
        if match:
            listed.add("tests/" + match.group(1))
    assert listed == set(main.tests)


def test_anonymous_describe_adds_no_title(main):
    """`test.describe(() => ...)` has an empty title in the JSON; it must not leave an empty segment."""
    assert "tests/home.spec.ts:25:3 › inside an anonymous describe" in main.tests
    assert not any(" ›  › " in t or t.endswith(" › ") for t in main.tests)


def test_project_is_not_part_of_the_id_and_the_worst_project_wins(main):
    """One id per test whatever the number of projects; a failure on any project fails the id."""
    entries = main.projects["tests/home.spec.ts:14:1 › is wide enough"]
    assert [(e.project, e.status, e.results) for e in entries] == [
        ("chromium", "expected", ("passed",)),
        ("mobile", "unexpected", ("failed",)),
    ]
    assert main.tests["tests/home.spec.ts:14:1 › is wide enough"] is F
    assert main.messages["tests/home.spec.ts:14:1 › is wide enough"].startswith("[mobile] Error: expect(")


def test_dropped_browser_projects_never_appear(main):
    """The injected config drops the firefox project (no such browser here): no firefox entry anywhere."""
    projects = {e.project for entries in main.projects.values() for e in entries}
    assert projects == {"setup", "chromium", "mobile"}
    assert _raw("main")["config"]["metadata"]["pbench"]["droppedProjects"] == ["firefox"]


def test_expected_failures_and_unexpected_passes(main):
    """test.fail() that fails is xfailed (not a pass); test.fail() that passes is failed (strict)."""
    known = main.projects["tests/items.spec.ts:43:3 › Items › known bug"][0]
    fixed = main.projects["tests/items.spec.ts:48:3 › Items › fixed bug"][0]
    assert (known.status, known.expected_status, known.results, known.outcome) == (
        "expected",
        "failed",
        ("failed",),
        XF,
    )
    assert (fixed.status, fixed.expected_status, fixed.results, fixed.outcome) == (
        "unexpected",
        "failed",
        ("passed",),
        F,
    )


def test_timed_out_test_is_failed_with_its_message(main):
    """A test over its own timeout (result status timedOut) is failed, never skipped."""
    test_id = "tests/items.spec.ts:53:3 › Items › slow search"
    assert main.projects[test_id][0].results == ("timedOut",)
    assert main.tests[test_id] is F
    assert main.messages[test_id] == "Test timeout of 1500ms exceeded."


def test_skip_and_fixme_reasons_are_kept(main):
    """Skipped tests carry the annotation that skipped them, so a report can say why; a test skipped
    without asking (serial group after a failure) says it did not run."""
    assert main.messages["tests/home.spec.ts:37:3 › wizard › step two"] == "[chromium] not run"
    assert main.messages["tests/items.spec.ts:31:8 › Items › exports to CSV"] == "skip"
    assert main.messages["tests/items.spec.ts:35:8 › Items › bulk archive"] == "fixme"
    assert (
        main.messages["tests/items.spec.ts:39:3 › Items › skips itself on chromium"]
        == "skip: not supported on chromium"
    )


def test_messages_are_plain_and_bounded(main):
    """Playwright colours its messages: no ANSI escape reaches a message, and none exceeds the limit."""
    assert main.messages
    for message in main.messages.values():
        assert "\x1b" not in message
        assert len(message) <= MESSAGE_LIMIT
    assert not any(main.messages.get(t) for t, o in main.tests.items() if o is P)


def test_totals_count_test_project_pairs(main):
    """Totals are Playwright's own stats (per test and project), in JUnit's keys plus flaky."""
    stats = _raw("main")["stats"]
    assert main.totals == {
        "tests": stats["expected"] + stats["unexpected"] + stats["flaky"] + stats["skipped"],
        "failures": stats["unexpected"],
        "errors": 0,
        "skipped": stats["skipped"],
        "flaky": 0,
    }
    assert main.totals["tests"] == 25


def test_report_is_a_junit_report(main):
    """The engine treats both runners alike: a PlaywrightReport IS a JUnitReport."""
    assert isinstance(main, JUnitReport)
    assert main.collection_skipped == ()
    assert dataclasses.replace(main, tests={}).tests == {}


# ------------------------------------------------------------------------------------- frontend dir


def test_frontend_dir_comes_from_the_injected_config(main):
    """Without an argument, paths are relative to config.metadata.pbench.frontendDir."""
    assert _raw("main")["config"]["metadata"]["pbench"]["frontendDir"] == FRONTEND_IN_CONTAINER
    assert _raw("main")["config"]["rootDir"] == FRONTEND_IN_CONTAINER + "/tests"
    explicit = parse_playwright_file(FIXTURES / "main.json", frontend_dir=FRONTEND_IN_CONTAINER)
    assert explicit.tests == main.tests


def test_explicit_frontend_dir_wins():
    """A caller that knows better (e.g. ids relative to the repository root) passes frontend_dir."""
    report = parse_playwright_file(FIXTURES / "main.json", frontend_dir="/work/repo")
    assert "frontend/tests/items.spec.ts:12:3 › Items › archive button" in report.tests
    assert len(report.tests) == len(EXPECTED_MAIN)


def test_without_pbench_metadata_the_config_file_dir_is_used():
    """A report from a run with the repository's own config (no injected metadata) is relative to that
    config's directory, where playwright.config.* lives: the frontend dir."""
    data = _raw("main")
    del data["config"]["metadata"]["pbench"]
    data["config"]["configFile"] = FRONTEND_IN_CONTAINER + "/playwright.config.ts"
    assert parse_playwright_json(json.dumps(data)).tests == EXPECTED_MAIN


# ------------------------------------------------------------------------------------------ retries


def test_flaky_is_recorded_and_graded_failed():
    """With retries allowed, fail-then-pass is Playwright's "flaky": exposed in `flaky`, graded FAILED
    (a pass that needed a retry is not a pass of one run)."""
    report = _load("retries")
    test_id = "tests/home.spec.ts:19:1 › flaky on first try"
    assert report.flaky == (test_id,)
    assert [(e.project, e.status, e.results) for e in report.projects[test_id]] == [
        ("chromium", "flaky", ("failed", "passed")),
        ("mobile", "flaky", ("failed", "passed")),
    ]
    assert report.tests[test_id] is F
    assert report.totals["flaky"] == 2


def test_retries_change_attempts_not_ids_or_outcomes(main):
    """Retries (and a built preview server instead of the dev server) give the same ids and outcomes;
    a test that keeps failing shows every attempt."""
    report = _load("retries")
    assert report.tests == main.tests
    assert report.projects["tests/items.spec.ts:19:3 › Items › restore button"][0].results == (
        "failed",
        "failed",
    )
    assert report.projects["tests/items.spec.ts:53:3 › Items › slow search"][0].results == (
        "timedOut",
        "timedOut",
    )
    assert report.projects["tests/items.spec.ts:48:3 › Items › fixed bug"][0].results == ("passed", "passed")


# --------------------------------------------------------------------------------------- load errors


def test_load_errors_are_collection_errors_of_their_files():
    """A spec that does not parse and one whose import fails abort the whole run: no test, and one
    collection error per file (the import error has no location: its file comes from the message)."""
    report = _load("load_error")
    assert report.tests == {}
    assert report.collection_errors == ("tests/import-error.spec.ts", "tests/syntax-error.spec.ts")
    assert report.messages["tests/import-error.spec.ts"].startswith("Error: Cannot find module")
    assert report.messages["tests/syntax-error.spec.ts"].startswith("SyntaxError: ")
    assert report.totals["errors"] == 2
    assert report.timed_out is False
    errors = _raw("load_error")["errors"]
    assert "location" not in errors[0] and "location" in errors[1]


def test_rerun_without_broken_files_gives_the_other_outcomes(main):
    """pbench-playwright.sh reruns without the files that failed to load: the other files' outcomes are
    exactly those of a run without them, and parse_playwright_out joins both reports."""
    assert _load("load_error_continue").tests == main.tests


def test_parse_out_dir_joins_the_aborted_run(tmp_path, main):
    """The output dir of such a run holds both reports; the result has the tests AND the load errors."""
    (tmp_path / REPORT_NAME).write_bytes((FIXTURES / "load_error_continue.json").read_bytes())
    (tmp_path / LOAD_ERRORS_REPORT_NAME).write_bytes((FIXTURES / "load_error.json").read_bytes())
    report = parse_playwright_out(tmp_path)
    assert report.tests == main.tests
    assert report.collection_errors == ("tests/import-error.spec.ts", "tests/syntax-error.spec.ts")
    assert report.totals["errors"] == 2
    assert report == with_load_errors(_load("load_error_continue"), _load("load_error"))


def test_parse_out_dir_without_a_first_run(tmp_path, main):
    (tmp_path / REPORT_NAME).write_bytes((FIXTURES / "main.json").read_bytes())
    assert parse_playwright_out(tmp_path) == main


# --------------------------------------------------------------------------------------- interrupted


def test_global_timeout_sets_timed_out_not_collection_errors():
    """The global timeout's top-level errors mean TIMEOUT for the engine, not a collection failure."""
    report = _load("interrupted")
    assert report.timed_out is True
    assert report.collection_errors == ()
    assert report.errors[0] == "Timed out waiting 20s for the test suite to run"


def test_a_run_cut_short_never_makes_a_test_pass():
    """The hanging test never finished: not run, not passed (Playwright gives it no result, or one
    "skipped" result, depending on timing). A test that some project skipped without asking for it is
    not passed either, even when another project passed it (only asked-for skips are left out)."""
    report = _load("interrupted")
    hang = "tests/hang.spec.ts:4:1 › waits forever"
    assert report.tests[hang] is S
    assert hang in report.not_run
    assert report.projects[hang][0].expected_status == "passed"
    cut = [
        t
        for t, entries in report.projects.items()
        if any(e.expected_status == "passed" and e.outcome is S for e in entries)
    ]
    assert len(cut) > 1
    for test_id in cut:
        assert report.tests[test_id] is not P, test_id


def test_skip_asked_for_on_one_project_does_not_hide_another_projects_pass(main):
    """A project that skipped a test on purpose is left out of the merge: the other project's pass counts."""
    data = _raw("main")
    spec = data["suites"][1]["specs"][0]  # home.spec.ts: has a title (chromium, mobile)
    mobile = spec["tests"][1]
    mobile.update(status="skipped", expectedStatus="skipped")
    mobile["results"][0]["status"] = "skipped"
    report = parse_playwright_json(json.dumps(data))
    assert report.tests["tests/home.spec.ts:3:1 › has a title"] is P
    mobile["expectedStatus"] = "passed"  # skipped without asking: it did not run there
    report = parse_playwright_json(json.dumps(data))
    assert report.tests["tests/home.spec.ts:3:1 › has a title"] is S


def test_interrupted_attempt_is_failed():
    """An attempt interrupted (Ctrl-C, SIGTERM) makes Playwright call the test "skipped"; it is failed."""
    data = _raw("main")
    spec = data["suites"][1]["specs"][0]  # home.spec.ts: has a title
    spec["tests"][0]["status"] = "skipped"
    spec["tests"][0]["results"][0]["status"] = "interrupted"
    report = parse_playwright_json(json.dumps(data))
    assert report.tests["tests/home.spec.ts:3:1 › has a title"] is F


# ------------------------------------------------------------------------------------------ helpers


def test_id_helpers():
    """Ids are built and split the same way everywhere (grading maps a collection error to its tests)."""
    test_id = "tests/items.spec.ts:42:3 › Items › archive button"
    assert make_test_id("tests/items.spec.ts", 42, 3, ["Items", "", "archive button"]) == test_id
    assert file_of(test_id) == "tests/items.spec.ts"
    assert file_of("tests/test_items.py::test_one") == "tests/test_items.py::test_one"
    assert is_playwright_id(test_id)
    assert not is_playwright_id("tests/test_items.py::test_one")
    assert selection_args(
        [test_id, "tests/items.spec.ts:42:3 › Items › other", "tests/a.spec.ts:7:1 › x"]
    ) == ["tests/a.spec.ts:7", "tests/items.spec.ts:42"]
    with pytest.raises(ValueError):
        selection_args(["tests/test_items.py::test_one"])


def test_error_file_rules():
    """location.file first, then "imported from", then a source path outside node_modules, else None."""
    base = FRONTEND_IN_CONTAINER
    assert error_file({"location": {"file": f"{base}/tests/a.spec.ts"}}, base) == "tests/a.spec.ts"
    assert (
        error_file({"message": f"Error: x imported from {base}/tests/b.spec.ts"}, base) == "tests/b.spec.ts"
    )
    stack = f"Error: boom\n    at {base}/node_modules/x/y.js:1:1\n    at {base}/tests/c.spec.ts:3:9"
    assert error_file({"message": "Error: boom", "stack": stack}, base) == "tests/c.spec.ts"
    assert error_file({"message": "Error: No tests found"}, base) is None
    # A relative specifier is no path: "./helper.mjs" does not name /helper.mjs (a link error names no file).
    link = "SyntaxError: The requested module './helper.mjs' does not provide an export named 'nope'"
    assert error_file({"message": link, "stack": link}, base) is None


def test_unattributable_error_gets_the_generic_id():
    data = _raw("load_error")
    data["errors"] = [{"message": "Error: No tests found"}]
    report = parse_playwright_json(json.dumps(data))
    assert report.collection_errors == (LOAD_ERROR_ID,)
    assert report.messages[LOAD_ERROR_ID] == "Error: No tests found"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "empty"),
        ("{not json", "malformed"),
        ('{"suites": []}', "not a Playwright JSON report"),
        ('{"config": {}, "suites": []}', "config.rootDir"),
        ('{"config": {"rootDir": "/r"}, "suites": {}}', "not a list"),
    ],
)
def test_bad_reports_raise_value_error(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_playwright_json(text)


def test_unknown_status_is_refused():
    """A status this parser does not know (a future Playwright) fails loudly instead of guessing."""
    data = _raw("main")
    data["suites"][0]["specs"][0]["tests"][0]["status"] = "mystery"
    with pytest.raises(ValueError, match="unknown test status 'mystery'"):
        parse_playwright_json(json.dumps(data))


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_playwright_file(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError):
        parse_playwright_out(tmp_path)


LIST_TAIL = """
  1 failed
    [chromium] › tests/items.spec.js:44:3 › Items › deleting an item removes it from the list ──────
  4 passed (36.5s)
[exit 1]
"""


def test_list_summary_counts_and_cross_check():
    """The list reporter's own counts (piped log) against the JSON report's stats: a JSON rewritten to
    all-passed disagrees; agreeing records give nothing; the last of two runs' summaries counts."""
    from tasks_lib.formats.playwright_report import cross_check_stats, list_summary_counts

    counts = list_summary_counts(LIST_TAIL)
    assert counts == {"failed": 1, "passed": 4}
    assert cross_check_stats({"expected": 4, "unexpected": 1, "skipped": 0, "flaky": 0}, counts) == []
    forged = {"expected": 5, "unexpected": 0}
    assert cross_check_stats(forged, counts) == [
        "5 passed in the JSON report, 4 in the test log",
        "0 unexpected in the JSON report, 1 failed in the log",
    ]
    assert cross_check_stats(forged, {}) == [
        "the JSON report has results but the test log has no Playwright summary"
    ]
    assert list_summary_counts(LIST_TAIL + "\n  2 passed (1.0s)\n") == {"passed": 2}
