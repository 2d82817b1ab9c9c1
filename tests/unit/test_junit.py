"""tasks_lib.formats.junit against JUnit XML and stdout written by REAL pytest runs.

The fixtures in tests/fixtures/junit/ come from tests/fixtures/junit/regenerate.sh, which runs the
harness's exact pytest command on tests/fixtures/junit/sample_project/backend (test modules named
check_*.py, so this suite never collects them). `test_live_run_matches_stored_fixture` reruns pytest
now, so the stored files cannot drift from what the installed pytest writes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tasks_lib.core.constants import Outcome
from tasks_lib.formats.junit import (
    INTERNAL_ERROR_ID,
    MESSAGE_LIMIT,
    JUnitReport,
    merge_outcomes,
    parse_junit,
    parse_junit_file,
    summary_outcomes,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "junit"
SAMPLE = FIXTURES / "sample_project"
# As containers/runner/pbench_runner.py runs pytest: every summary line, not the PASSES section of -rA.
HARNESS_FLAGS = ["-rfEsxXp", "-p", "no:cacheprovider"]
MAIN_SELECTION = ["check_root.py", "tests"]

P, F, E, S, XF, XP = (
    Outcome.PASSED,
    Outcome.FAILED,
    Outcome.ERROR,
    Outcome.SKIPPED,
    Outcome.XFAILED,
    Outcome.XPASSED,
)

# Every test of the `main` run, in pytest's order, with the outcome JUnit alone gives it.
EXPECTED_MAIN: dict[str, Outcome] = {
    "check_root.py::test_root_level": P,
    "tests/api/check_inherit.py::test_imported_function": P,
    "tests/api/check_inherit.py::TestInherited::test_shared_behaviour": P,
    "tests/api/check_inherit.py::TestInherited::test_own": P,
    "tests/api/routes/check_users.py::test_get_existing_user": P,
    "tests/api/routes/check_users.py::test_get_missing_user": F,
    "tests/check_classes.py::TestUsers::test_create": P,
    "tests/check_classes.py::TestUsers::test_delete": F,
    "tests/check_classes.py::TestUsers::TestNested::test_inner": P,
    "tests/check_classes.py::TestUsers::TestNested::TestDeeper::test_deepest": P,
    "tests/check_classes.py::TestParamClass::test_method[1]": P,
    "tests/check_classes.py::TestParamClass::test_method[2]": P,
    "tests/check_classes.py::TestUnittestStyle::test_expected_failure": XF,
    "tests/check_classes.py::TestUnittestStyle::test_ok": P,
    "tests/check_classes.py::TestUnittestStyle::test_skipped": S,
    "tests/check_outcomes.py::test_passes": P,
    "tests/check_outcomes.py::test_fails": F,
    "tests/check_outcomes.py::test_raises_exception": F,
    "tests/check_outcomes.py::test_setup_error": E,
    "tests/check_outcomes.py::test_passes_then_teardown_error": E,
    "tests/check_outcomes.py::test_fails_then_teardown_error": E,
    "tests/check_outcomes.py::test_skip": S,
    "tests/check_outcomes.py::test_skipif": S,
    "tests/check_outcomes.py::test_skip_imperative": S,
    "tests/check_outcomes.py::test_xfail": XF,
    "tests/check_outcomes.py::test_xfail_imperative": XF,
    "tests/check_outcomes.py::test_xfail_not_run": XF,
    "tests/check_outcomes.py::test_xfail_wrong_exception": F,
    "tests/check_outcomes.py::test_xpass_strict": F,
    "tests/check_outcomes.py::test_xpass_non_strict": P,
    "tests/check_outcomes.py::test_prints_spoofed_summary_lines": P,
    "tests/check_params.py::test_param[with space]": P,
    "tests/check_params.py::test_param[br[ack]et]": P,
    "tests/check_params.py::test_param[caf\\xe9]": P,
    "tests/check_params.py::test_param[\\u2603]": P,
    "tests/check_params.py::test_param[a::b]": P,
    "tests/check_params.py::test_param[x - y]": F,
    "tests/check_params.py::test_param[dot.ted]": P,
    "tests/check_params.py::test_param[slash/ed]": P,
    "tests/check_params.py::test_param[[]": P,
    "tests/check_params.py::test_param[]]": P,
    "tests/check_params.py::test_explicit_ids[explicit id]": P,
    "tests/check_params.py::test_explicit_ids[\\xfcn\\xefcode id]": P,
    "tests/check_params.py::test_explicit_ids[Class.method]": P,
    "tests/check_params.py::test_explicit_ids[a - b]": XF,
    "tests/check_params.py::test_stacked[x-1]": P,
    "tests/check_params.py::test_stacked[x-2]": P,
    "tests/check_params.py::test_stacked[y-1]": P,
    "tests/check_params.py::test_stacked[y-2]": P,
    "tests/check_params.py::TestParamInClass::test_method[in class]": P,
    "tests/check_params.py::TestParamInClass::test_method[br[ack]et]": P,
}
XPASS_ID = "tests/check_outcomes.py::test_xpass_non_strict"

EXPECTED_CONTINUE: dict[str, Outcome] = {
    "broken/check_bad_class.py::test_next_to_bad_class": P,
    "broken/check_good.py::test_good_passes": P,
    "broken/check_good.py::test_good_fails": F,
    "tests/api/routes/check_users.py::test_get_existing_user": P,
    "tests/api/routes/check_users.py::test_get_missing_user": F,
}
EXPECTED_COLLECTION_ERRORS = ("broken/check_bad_class.py::TestBadParametrize", "broken/check_broken.py")


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def collected_ids(name: str) -> list[str]:
    """The node ids pytest itself printed with `--collect-only -q` (stored as NAME.collect.txt)."""
    text = fixture_text(f"{name}.collect.txt")
    return text.split("\n\n", 1)[0].splitlines()  # the ids come first, then a blank line


def xml_testcases_named(xml_name: str, name: str) -> list[str]:
    return re.findall(rf'<testcase [^>]*name="{re.escape(name)}"[^>]*>', fixture_text(xml_name))


@pytest.fixture(scope="module")
def main() -> JUnitReport:
    return parse_junit_file(FIXTURES / "main.xml")


# --- node ids ---------------------------------------------------------------------------------


def test_main_ids_are_the_ids_pytest_prints(main):
    """Node id rule: the ids derived from file/classname/name equal `pytest --collect-only -q`, in order."""
    assert list(main.tests) == collected_ids("main")


def test_main_exact_ids_and_outcomes(main):
    """Outcome mapping rule, end to end: every test of the real run gets the expected id and outcome."""
    assert main.tests == EXPECTED_MAIN


def test_classes_and_nested_classes(main):
    """Node id rule: the class part of classname (after the module from `file`) becomes ::-joined classes."""
    assert main.tests["tests/check_classes.py::TestUsers::TestNested::TestDeeper::test_deepest"] is P
    assert main.tests["tests/check_classes.py::TestParamClass::test_method[2]"] is P
    assert main.tests["tests/check_classes.py::TestUnittestStyle::test_ok"] is P
    assert 'classname="tests.check_classes.TestUsers.TestNested.TestDeeper"' in fixture_text("main.xml")


def test_parametrized_ids_are_kept_verbatim(main):
    """Node id rule: parameter ids (spaces, brackets, escaped unicode, '::', ' - ', '.', '/') are not split."""
    for param in [
        "with space",
        "br[ack]et",
        "caf\\xe9",
        "\\u2603",
        "a::b",
        "x - y",
        "dot.ted",
        "slash/ed",
        "[",
        "]",
    ]:
        assert f"tests/check_params.py::test_param[{param}]" in main.tests, param
    assert main.tests["tests/check_params.py::TestParamInClass::test_method[br[ack]et]"] is P
    # pytest escapes non-ASCII in ids: the id holds a backslash sequence, not the character.
    assert "tests/check_params.py::test_param[café]" not in main.tests


def test_file_at_the_root(main):
    """Node id rule: a module at the root of the run has a classname without dots."""
    assert main.tests["check_root.py::test_root_level"] is P
    assert 'classname="check_root" name="test_root_level" file="check_root.py"' in fixture_text("main.xml")


def test_inherited_and_imported_tests_use_the_collecting_module(main):
    """Node id rule: `file` names where the test is DEFINED; the node id path comes from the classname."""
    xml = fixture_text("main.xml")
    assert (
        'classname="tests.api.check_inherit.TestInherited" name="test_shared_behaviour" '
        'file="tests/base_suite.py"' in xml
    )
    assert (
        'classname="tests.api.check_inherit" name="test_imported_function" file="tests/base_suite.py"' in xml
    )
    assert main.tests["tests/api/check_inherit.py::TestInherited::test_shared_behaviour"] is P
    assert main.tests["tests/api/check_inherit.py::test_imported_function"] is P
    assert not any(node_id.startswith("tests/base_suite.py") for node_id in main.tests)


def test_inherited_test_alone_in_its_module_falls_back_to_the_classname():
    """Node id rule: with no other test naming the collecting module, its path is rebuilt from classname."""
    xml = (
        '<testsuites><testsuite tests="1"><testcase classname="tests.api.check_only.TestOnly" '
        'name="test_shared" file="tests/base.py" line="3"/></testsuite></testsuites>'
    )
    assert parse_junit(xml).tests == {"tests/api/check_only.py::TestOnly::test_shared": P}


def test_rootdir_prefix_is_stripped():
    """rootdir_prefix rule: with the rootdir above the cwd, stripping "backend" gives the cwd-relative ids."""
    raw = parse_junit(fixture_text("prefixed.xml"))
    assert list(raw.tests) == collected_ids("prefixed")
    assert all(node_id.startswith("backend/") for node_id in raw.tests)
    for prefix in ("backend", "backend/"):
        stripped = parse_junit(fixture_text("prefixed.xml"), rootdir_prefix=prefix)
        assert stripped.tests == EXPECTED_MAIN
        assert stripped.collection_skipped == ("tests/check_module_skip.py",)
    assert parse_junit_file(FIXTURES / "prefixed.xml", rootdir_prefix="backend").tests == EXPECTED_MAIN


def test_prefixed_run_summary_is_relative_to_the_cwd():
    """rootdir_prefix rule: -rA prints cwd-relative ids, which match the JUnit ids only once stripped."""
    summary = summary_outcomes(fixture_text("prefixed.stdout.txt"))
    stripped = parse_junit(fixture_text("prefixed.xml"), rootdir_prefix="backend")
    assert set(summary) <= set(stripped.tests)
    assert merge_outcomes(stripped, summary).tests[XPASS_ID] is XP


def test_rootdir_prefix_leaves_other_paths_alone():
    """rootdir_prefix rule: a path that does not start with the prefix (or only shares letters) is kept."""
    xml = (
        '<testsuite><testcase classname="backend2.t" name="test_a" file="backend2/t.py" line="1"/>'
        '<testcase classname="backend.t" name="test_b" file="backend/t.py" line="1"/></testsuite>'
    )
    assert parse_junit(xml, rootdir_prefix="backend").tests == {"backend2/t.py::test_a": P, "t.py::test_b": P}


def test_xunit2_fallback_rebuilds_paths_from_classname():
    """xunit2 rule: without `file`, classname dots become a path and the class part starts at Test*."""
    report = parse_junit(fixture_text("main_xunit2.xml"))
    assert 'file="' not in fixture_text("main_xunit2.xml")
    assert report.tests == EXPECTED_MAIN
    assert report.collection_skipped == ("tests/check_module_skip.py",)


def test_xunit2_fallback_is_ambiguous_for_dotted_directories():
    """xunit2 rule (documented ambiguity): a directory with a dot in its name cannot be told from a package."""
    xml = '<testsuite><testcase classname="tests.v1.0.test_api.TestX" name="test_a"/></testsuite>'
    assert parse_junit(xml).tests == {"tests/v1/0/test_api.py::TestX::test_a": P}
    with_file = '<testsuite><testcase classname="tests.v1.0.test_api.TestX" name="test_a" file="tests/v1.0/test_api.py" line="2"/></testsuite>'  # noqa: E501
    assert parse_junit(with_file).tests == {"tests/v1.0/test_api.py::TestX::test_a": P}


# --- outcomes ---------------------------------------------------------------------------------


def test_failure_and_error_children(main):
    """Outcome rule: <failure> -> failed (also an exception in the test body); <error> in setup -> error."""
    assert main.tests["tests/check_outcomes.py::test_fails"] is F
    assert main.tests["tests/check_outcomes.py::test_raises_exception"] is F
    assert main.tests["tests/check_outcomes.py::test_setup_error"] is E
    assert main.messages["tests/check_outcomes.py::test_setup_error"] == (
        'failed on setup with "RuntimeError: fixture setup exploded"'
    )


def test_teardown_errors_and_duplicates_keep_the_worst(main):
    """Outcome rule: a pass + teardown error is one <error> testcase; a failure + teardown error is two
    testcases with the same name, and error (the worst) wins."""
    assert len(xml_testcases_named("main.xml", "test_passes_then_teardown_error")) == 1
    assert len(xml_testcases_named("main.xml", "test_fails_then_teardown_error")) == 2
    assert main.tests["tests/check_outcomes.py::test_passes_then_teardown_error"] is E
    assert main.tests["tests/check_outcomes.py::test_fails_then_teardown_error"] is E
    assert main.messages["tests/check_outcomes.py::test_fails_then_teardown_error"].startswith(
        "failed on teardown with"
    )


def test_worst_outcome_wins_whatever_the_order():
    """Outcome rule: error > failed > skipped > xfailed > xpassed > passed, for duplicates in any order."""
    case = '<testcase classname="t" name="test_a" file="t.py" line="1">{}</testcase>'
    for children in (
        ["<failure message='f'/>", "<error message='e'/>"],
        ["<error message='e'/>", "<failure message='f'/>"],
    ):  # noqa: E501
        xml = "<testsuite>" + "".join(case.format(child) for child in children) + "</testsuite>"
        report = parse_junit(xml)
        assert report.tests == {"t.py::test_a": E}
        assert report.messages == {"t.py::test_a": "e"}
    both = parse_junit(
        "<testsuite>" + case.format("<skipped message='s'/><failure message='f'/>") + "</testsuite>"
    )
    assert both.tests == {"t.py::test_a": F}
    passed_then_skipped = parse_junit(
        "<testsuite>" + case.format("") + case.format("<skipped/>") + "</testsuite>"
    )
    assert passed_then_skipped.tests == {"t.py::test_a": S}


def test_skips(main):
    """Outcome rule: <skipped type="pytest.skip"> (mark, skipif, imperative, unittest) -> skipped."""
    for name in ("test_skip", "test_skipif", "test_skip_imperative"):
        assert main.tests[f"tests/check_outcomes.py::{name}"] is S
    assert main.tests["tests/check_classes.py::TestUnittestStyle::test_skipped"] is S
    assert main.messages["tests/check_outcomes.py::test_skipif"] == "skipif condition is true"


def test_xfails(main):
    """Outcome rule: <skipped type="pytest.xfail"> -> xfailed (mark, imperative, run=False, unittest)."""
    for name in ("test_xfail", "test_xfail_imperative", "test_xfail_not_run"):
        assert main.tests[f"tests/check_outcomes.py::{name}"] is XF
    assert main.tests["tests/check_classes.py::TestUnittestStyle::test_expected_failure"] is XF
    assert (
        main.messages["tests/check_outcomes.py::test_xfail_not_run"] == "[NOTRUN] would crash the interpreter"
    )
    # xfail(raises=KeyError) with another exception is a real failure.
    assert main.tests["tests/check_outcomes.py::test_xfail_wrong_exception"] is F


def test_xpasses_in_junit(main):
    """Outcome rule: a strict xpass is a <failure> "[XPASS(strict)]" -> failed; a non-strict one is a plain pass."""
    assert main.tests["tests/check_outcomes.py::test_xpass_strict"] is F
    assert main.messages["tests/check_outcomes.py::test_xpass_strict"] == "[XPASS(strict)] fixed upstream"
    assert main.tests[XPASS_ID] is P
    assert xml_testcases_named("main.xml", "test_xpass_non_strict")[0].endswith("/>")


def test_xpass_reported_as_skipped_failure_is_failed():
    """Outcome rule: pytest writes a FAILED report carrying wasxfail as an untyped <skipped>; it is failed."""
    xml = (
        '<testsuite><testcase classname="t" name="test_a" file="t.py" line="1">'
        '<skipped message="xfail-marked test passes unexpectedly"/></testcase></testsuite>'
    )
    assert parse_junit(xml).tests == {"t.py::test_a": F}


def test_messages_are_short(main):
    """Message rule: failure messages come from the message attribute, truncated to MESSAGE_LIMIT chars."""
    assert main.messages["tests/check_outcomes.py::test_fails"].startswith(
        "AssertionError: arithmetic is broken"
    )
    assert XPASS_ID not in main.messages
    assert "tests/check_outcomes.py::test_passes" not in main.messages
    long = "x" * 2000
    xml = (
        f'<testsuite><testcase classname="t" name="test_a" file="t.py" line="1"><failure message="{long}"/>'
        "</testcase></testsuite>"
    )
    message = parse_junit(xml).messages["t.py::test_a"]
    assert len(message) == MESSAGE_LIMIT and message.endswith("...")


def test_totals_are_the_testsuite_counters(main):
    """Totals rule: totals are the <testsuite> attributes, which are not the number of distinct tests."""
    assert main.totals == {"tests": 53, "failures": 8, "errors": 3, "skipped": 10}
    assert len(main.tests) == 51


# --- collection -------------------------------------------------------------------------------


def test_module_skip_is_not_a_test(main):
    """Collection rule: a module skipped at import ("collection skipped") is recorded, but not as a test id."""
    assert main.collection_skipped == ("tests/check_module_skip.py",)
    assert not any("check_module_skip" in node_id for node_id in main.tests)
    assert main.collection_errors == ()


def test_collection_error_interrupts_the_run():
    """Collection rule: an interrupted run has no test at all; failed modules/classes go to collection_errors."""
    assert "Interrupted: 2 errors during collection" in fixture_text("collect_error.stdout.txt")
    report = parse_junit_file(FIXTURES / "collect_error.xml")
    assert report.tests == {}
    assert report.collection_errors == EXPECTED_COLLECTION_ERRORS
    assert report.messages["broken/check_broken.py"] == (
        "ModuleNotFoundError: No module named 'nonexistent_dependency_for_junit_fixture'"
    )
    assert report.messages["broken/check_bad_class.py::TestBadParametrize"] == (
        "In test_method: function uses no argument 'no_such_argument'"
    )


def test_collection_error_with_continue():
    """Collection rule: with --continue-on-collection-errors the good tests are parsed next to the errors."""
    report = parse_junit_file(FIXTURES / "collect_error_continue.xml")
    assert report.tests == EXPECTED_CONTINUE
    assert list(report.tests) == collected_ids("collect_error_continue")
    assert report.collection_errors == EXPECTED_COLLECTION_ERRORS
    assert report.totals == {"tests": 7, "failures": 2, "errors": 2, "skipped": 0}


def test_collection_error_in_xunit2_has_no_file():
    """Collection rule + xunit2: the module path is rebuilt from the dotted name."""
    xml = fixture_text("collect_error.xml").replace(' file="broken/check_broken.py"', "")
    xml = xml.replace(' file="broken/check_bad_class.py"', "")
    assert parse_junit(xml).collection_errors == EXPECTED_COLLECTION_ERRORS


def test_internal_error_is_reported_as_a_collection_error():
    """Collection rule: pytest's INTERNALERROR testcase (classname "pytest", name "internal") is not a test."""
    xml = (
        '<testsuites><testsuite errors="1" tests="1"><testcase classname="pytest" name="internal">'
        '<error message="internal error">Traceback ...</error></testcase></testsuite></testsuites>'
    )
    report = parse_junit(xml)
    assert report.tests == {}
    assert report.collection_errors == (INTERNAL_ERROR_ID,)


def test_empty_run_is_valid():
    """Parse rule: a real run that selected no test is a valid report with no tests (not a ValueError)."""
    report = parse_junit_file(FIXTURES / "empty.xml")
    assert report == JUnitReport(
        tests={},
        collection_errors=(),
        totals={"tests": 0, "failures": 0, "errors": 0, "skipped": 0},
        messages={},
    )


# --- malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xml", "match"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ("<testsuites><testsuite>", "malformed"),
        ("not xml at all", "malformed"),
        ("<html><body/></html>", "root element is <html>"),
        ('<!DOCTYPE x [<!ENTITY a "b">]><testsuite/>', "DOCTYPE"),
        ('<testsuite tests="many"/>', "not an integer"),
        ('<testsuite><testcase classname="t" file="t.py"/></testsuite>', "without a name"),
    ],
)
def test_malformed_xml_raises_value_error(xml, match):
    """Parse rule: empty, malformed or non-JUnit XML raises ValueError with a clear message."""
    with pytest.raises(ValueError, match=match):
        parse_junit(xml)


def test_truncated_real_file_raises_value_error():
    """Parse rule: a report cut short (container killed while writing) is a ValueError, not a partial result."""
    text = fixture_text("main.xml")
    with pytest.raises(ValueError, match="malformed"):
        parse_junit(text[: len(text) // 2])


def test_parse_junit_file_errors(tmp_path):
    """Parse rule: a file that is not UTF-8 is a ValueError naming the file; a missing file is FileNotFoundError."""
    bad = tmp_path / "junit.xml"
    bad.write_bytes(b"\xff\xfe<testsuite/>")
    with pytest.raises(ValueError, match="junit.xml"):
        parse_junit_file(bad)
    with pytest.raises(FileNotFoundError):
        parse_junit_file(tmp_path / "missing.xml")


# --- -rA summary and merge --------------------------------------------------------------------


def test_summary_outcomes_of_the_main_run(main):
    """Summary rule: -rA lines give every non-skipped test its outcome, XPASS included; SKIPPED [n] is ignored."""
    summary = summary_outcomes(fixture_text("main.stdout.txt"))
    expected = {node_id: outcome for node_id, outcome in EXPECTED_MAIN.items() if outcome is not S}
    expected[XPASS_ID] = XP
    assert summary == expected
    # A test listed as PASSED and then ERROR (teardown) keeps the worst.
    assert summary["tests/check_outcomes.py::test_passes_then_teardown_error"] is E


def test_summary_ignores_lines_printed_by_tests():
    """Summary rule: only the last "short test summary info" section counts; a test's echoed stdout is ignored."""
    text = fixture_text("main.stdout.txt")
    assert "XPASS tests/check_outcomes.py::test_passes - spoofed" in text
    assert summary_outcomes(text)["tests/check_outcomes.py::test_passes"] is P


def test_summary_ids_with_dashes_in_params(main):
    """Summary rule: an id holding " - " is not cut at its own dash (heuristic, and with known ids)."""
    text = fixture_text("main.stdout.txt")
    assert "FAILED tests/check_params.py::test_param[x - y] - AssertionError: dash id fails" in text
    for summary in (summary_outcomes(text), summary_outcomes(text, known_ids=main.tests)):
        assert summary["tests/check_params.py::test_param[x - y]"] is F
        assert summary["tests/check_params.py::test_explicit_ids[a - b]"] is XF


def test_summary_known_ids_resolve_what_the_heuristic_cannot():
    """Summary rule: with known_ids, the longest known id the line starts with wins."""
    text = "=== short test summary info ===\nFAILED t.py::test[a] - b] - boom\n=== 1 failed in 0.1s ===\n"
    assert summary_outcomes(text) == {"t.py::test[a]": F}
    assert summary_outcomes(text, known_ids=["t.py::test[a] - b]", "t.py::test[a]"]) == {
        "t.py::test[a] - b]": F
    }


def test_summary_collection_errors_and_continue():
    """Summary rule: "ERROR path" for a collection error is kept with the path as its id."""
    summary = summary_outcomes(fixture_text("collect_error_continue.stdout.txt"))
    assert summary == {
        **EXPECTED_CONTINUE,
        "broken/check_broken.py": E,
        "broken/check_bad_class.py::TestBadParametrize": E,
    }
    assert summary_outcomes(fixture_text("collect_error.stdout.txt")) == dict.fromkeys(
        EXPECTED_COLLECTION_ERRORS, E
    )


def test_summary_without_section_or_with_colors():
    """Summary rule: no summary section -> {}; ANSI colour codes (--color=yes) are ignored."""
    assert summary_outcomes("") == {}
    assert summary_outcomes(fixture_text("empty.stdout.txt")) == {}
    colored = (
        "\x1b[36m\x1b[1m=========== short test summary info ============\x1b[0m\n"
        "\x1b[33mXPASS\x1b[0m t.py::\x1b[1mtest_a\x1b[0m - reason\n"
        "\x1b[32mPASSED\x1b[0m t.py::\x1b[1mtest_b[x y]\x1b[0m\n"
        "\x1b[33mSKIPPED\x1b[0m [1] t.py:3: why\n"
        "\x1b[33m======= 1 passed, 1 xpassed in 0.01s =======\x1b[0m\n"
    )
    assert summary_outcomes(colored) == {"t.py::test_a": XP, "t.py::test_b[x y]": P}


def test_summary_unfolded_skip_lines_have_ids():
    """Summary rule: with --no-fold-skipped pytest prints "SKIPPED id - reason", which is kept."""
    text = "==== short test summary info ====\nSKIPPED t.py::test_a - not today\n==== 1 skipped ====\n"
    assert summary_outcomes(text) == {"t.py::test_a": S}


def test_merge_upgrades_only_passed_to_xpassed(main):
    """Merge rule: XPASS in the summary turns passed into xpassed; nothing else changes."""
    summary = summary_outcomes(fixture_text("main.stdout.txt"))
    merged = merge_outcomes(main, summary)
    assert merged.tests == {**EXPECTED_MAIN, XPASS_ID: XP}
    assert merged.collection_errors == main.collection_errors
    assert merged.totals == main.totals and merged.messages == main.messages
    assert main.tests[XPASS_ID] is P  # the input report is not changed


def test_merge_never_downgrades_or_adds():
    """Merge rule: summary outcomes other than XPASS, XPASS for a non-passed test, and unknown ids are ignored."""
    report = JUnitReport(
        tests={"t.py::a": P, "t.py::b": F, "t.py::c": P},
        collection_errors=(),
        totals={},
        messages={},
    )
    summary = {"t.py::a": F, "t.py::b": XP, "t.py::c": S, "t.py::new": XP}
    assert merge_outcomes(report, summary).tests == report.tests


# --- live run ---------------------------------------------------------------------------------


def test_live_run_matches_stored_fixture(tmp_path):
    """Freshness rule: pytest run now, with the harness flags, gives the stored ids and outcomes (and XPASS)."""
    project = tmp_path / "sample_project"
    shutil.copytree(SAMPLE, project)
    junit = tmp_path / "out" / "junit.xml"
    env = {
        key: value for key, value in os.environ.items() if key not in {"CI", "BUILD_NUMBER", "PYTEST_ADDOPTS"}
    }
    # Third-party plugins do not change the XML; not loading them halves the run time.
    env.update(PYTHONDONTWRITEBYTECODE="1", COLUMNS="80", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *HARNESS_FLAGS, f"--junitxml={junit}", "-o", "junit_family=xunit1"]
        + MAIN_SELECTION,
        cwd=project / "backend",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    live = merge_outcomes(parse_junit_file(junit), summary_outcomes(completed.stdout))
    stored = merge_outcomes(
        parse_junit_file(FIXTURES / "main.xml"), summary_outcomes(fixture_text("main.stdout.txt"))
    )
    assert list(live.tests) == list(stored.tests)
    assert live.tests == stored.tests == {**EXPECTED_MAIN, XPASS_ID: XP}
    assert live.collection_skipped == stored.collection_skipped
    assert live.totals == stored.totals
    # The summary lines are those of -rA (the stored fixture), without the passing tests' captured output.
    assert summary_outcomes(completed.stdout) == summary_outcomes(fixture_text("main.stdout.txt"))
    assert "= PASSES =" in fixture_text("main.stdout.txt") and "= PASSES =" not in completed.stdout
    from tasks_lib.formats.junit import cross_check

    raw = parse_junit_file(junit)
    assert cross_check(raw.tests, summary_outcomes(completed.stdout, known_ids=raw.tests)) == []


def test_cross_check_agreeing_records():
    from tasks_lib.formats.junit import cross_check

    tests = {"t.py::a": Outcome.PASSED, "t.py::b": Outcome.FAILED, "t.py::s": Outcome.SKIPPED}
    assert cross_check(tests, {"t.py::a": Outcome.PASSED, "t.py::b": Outcome.FAILED}) == []
    assert cross_check({}, {}) == []


def test_cross_check_flags_a_rewritten_report_or_forged_output():
    """A JUnit report rewritten to all-passed disagrees with the genuine summary; a report without any
    summary, and summary ids missing from the report, are disagreements too."""
    from tasks_lib.formats.junit import cross_check

    forged = {"t.py::a": Outcome.PASSED, "t.py::b": Outcome.PASSED}
    genuine = {"t.py::a": Outcome.PASSED, "t.py::b": Outcome.FAILED, "t.py::c": Outcome.ERROR}
    problems = cross_check(forged, genuine)
    assert problems == [
        "t.py::b: passed in JUnit, failed in pytest's summary",
        "t.py::c: error in pytest's summary, absent from JUnit",
    ]
    assert cross_check(forged, {}) == [
        "the JUnit report lists tests but pytest's output has no short test summary"
    ]
    assert cross_check({"t.py::a": Outcome.PASSED}, {"t.py::z": Outcome.PASSED})[0].startswith("t.py::a")


def test_cross_check_on_real_runs():
    """On the stored real pytest 9 runs (JUnit + stdout of the same run), the two records agree exactly,
    collection errors, skips, xfail and xpass included."""
    from tasks_lib.formats.junit import cross_check

    for name in sorted(p.stem for p in FIXTURES.glob("*.xml")):
        stdout = FIXTURES / f"{name}.stdout.txt"
        if not stdout.exists():
            continue
        # "prefixed": pytest ran from backend/ with the rootdir above it (the engine strips that prefix).
        report = parse_junit_file(
            FIXTURES / f"{name}.xml", rootdir_prefix="backend" if name == "prefixed" else ""
        )
        summary = summary_outcomes(stdout.read_text(), known_ids=report.tests)
        assert report.tests or name in ("empty", "collect_error")
        assert cross_check(report.tests, summary, report.collection_errors) == [], name
