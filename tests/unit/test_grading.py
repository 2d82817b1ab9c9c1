"""Grading (pure): FAIL_TO_PASS / PASS_TO_PASS from repeated runs, one side's verdict, both sides combined.

Every label must come from executed tests (issue 3, stage 4) and a score of 1 needs every FAIL_TO_PASS and
every PASS_TO_PASS test passed (ARCHITECTURE.md); these tests pin those rules on synthetic outcomes.
"""

from __future__ import annotations

import pytest

from tasks_lib.core.constants import INFRA_STATUSES, Blame, Outcome, RunStatus, Status
from tasks_lib.engine.grading import Grade, combine, extract_labels, grade

P, F, E, S = Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.SKIPPED
XF, XP = Outcome.XFAILED, Outcome.XPASSED

A = "tests/test_items.py::test_a"
B = "tests/test_items.py::test_b"
C = "tests/test_items.py::test_c"
D = "tests/test_users.py::test_d"


def labels(base, head, **kw):
    """Base runs twice and head runs three times, as extraction does, unless the test says otherwise."""
    return extract_labels(base, head, **kw)


# --------------------------------------------------------------------------- extract_labels


def test_fail_to_pass_and_pass_to_pass_come_from_the_outcome_pair():
    """Rule: F2P = fail at base -> pass at head; P2P = pass -> pass; pass -> fail is in neither list."""
    base = [{A: F, B: P, C: P, D: F}] * 2
    head = [{A: P, B: P, C: F, D: F}] * 3
    got = labels(base, head)
    assert got.fail_to_pass == [A]
    assert got.pass_to_pass == [B]
    assert C not in got.fail_to_pass + got.pass_to_pass  # pass -> fail: a regression, never a label
    assert D not in got.fail_to_pass + got.pass_to_pass  # fail -> fail
    assert got.flaky == [] and got.unknown_at_base == [] and not got.fallback_used


@pytest.mark.parametrize("base_outcome", [F, E, S, XF])
def test_anything_but_passed_at_base_then_passed_at_head_is_fail_to_pass(base_outcome):
    """Rule: skipped (or error, or xfailed) at base then passed at head counts as FAIL_TO_PASS."""
    got = labels([{A: base_outcome}] * 2, [{A: P}] * 3)
    assert got.fail_to_pass == [A]
    assert got.pass_to_pass == []


@pytest.mark.parametrize("head_outcome", [F, E, S, XF, XP])
def test_only_passed_at_head_can_become_a_label(head_outcome):
    """Rule: only `passed` counts as passing at head; skipped, xfailed and xpassed never make a label."""
    got = labels([{A: F, B: P}] * 2, [{A: head_outcome, B: head_outcome}] * 3)
    assert got.fail_to_pass == [] and got.pass_to_pass == []


def test_outcome_changing_across_head_runs_is_flaky_and_in_neither_list():
    """Rule: a test whose outcome changes between runs of the same side (head) is flaky, in neither list."""
    base = [{A: F, B: P}] * 2
    head = [{A: P, B: P}, {A: F, B: P}, {A: P, B: P}]
    got = labels(base, head)
    assert got.flaky == [A]
    assert got.fail_to_pass == []
    assert got.pass_to_pass == [B]


def test_outcome_changing_across_base_runs_is_flaky_and_in_neither_list():
    """Rule: flakiness on the base side also excludes a test (it would otherwise flip between F2P and P2P)."""
    base = [{A: F, B: P}, {A: P, B: P}]
    head = [{A: P, B: P}] * 3
    got = labels(base, head)
    assert got.flaky == [A]
    assert A not in got.fail_to_pass + got.pass_to_pass


def test_test_missing_in_one_head_run_but_present_in_another_is_flaky():
    """Rule: missing in one run and present in another is an outcome change: flaky, not a label."""
    base = [{A: F, B: F}] * 2
    head = [{A: P, B: P}, {A: P}, {A: P, B: P}]
    got = labels(base, head)
    assert got.flaky == [B]
    assert got.fail_to_pass == [A]


def test_test_missing_in_one_base_run_but_present_in_another_is_flaky():
    """Rule: the same holds on the base side: absent once, passed once is flaky."""
    base = [{A: P, B: P}, {A: P}]
    head = [{A: P, B: P}] * 3
    got = labels(base, head)
    assert got.flaky == [B]
    assert got.pass_to_pass == [A]


def test_flaky_test_that_also_fails_at_head_is_still_reported_flaky():
    """Rule: flakiness is recorded whatever the other side did, so the operator sees every flaky test."""
    got = labels([{A: P}, {A: F}], [{A: F}] * 3)
    assert got.flaky == [A]
    assert got.fail_to_pass == [] and got.pass_to_pass == []


def test_absent_from_a_clean_base_run_and_passing_at_head_is_fail_to_pass():
    """Rule: a test absent from every base run whose file collected did not pass there: F2P, no fallback."""
    got = labels([{A: P}] * 2, [{A: P, B: P}] * 3)
    assert got.fail_to_pass == [B]
    assert got.pass_to_pass == [A]
    assert not got.fallback_used
    assert got.unknown_at_base == []


def test_outcomes_given_as_plain_strings_grade_like_enums():
    """Rule: outcomes read back from JSON (plain strings) give the same labels as Outcome members."""
    as_enum = labels([{A: F, B: P}] * 2, [{A: P, B: P}] * 3)
    as_str = labels([{A: "failed", B: "passed"}] * 2, [{A: "passed", B: "passed"}] * 3)
    assert as_enum == as_str


def test_labels_are_sorted_and_deterministic():
    """Rule: the same runs always give the same lists in the same order (reruns are idempotent)."""
    ids = [f"tests/test_m.py::test_{n}" for n in ("z", "a", "m", "b")]
    base = [dict.fromkeys(ids, F)] * 2
    head = [dict.fromkeys(reversed(ids), P)] * 3
    got = labels(base, head)
    assert got.fail_to_pass == sorted(ids)
    assert labels(base, head) == got


@pytest.mark.parametrize(
    ("base", "head"),
    [([], [{A: P}]), ([{A: F}], []), ([], [])],
    ids=["no-base-run", "no-head-run", "no-runs"],
)
def test_extraction_needs_at_least_one_run_per_side(base, head):
    """Rule: labels need at least one run of each side; none is an error, never empty labels."""
    with pytest.raises(ValueError, match="at least one run"):
        extract_labels(base, head)


NEW = "tests/api/test_new.py"


def test_collection_error_fallback_keeps_only_tests_the_test_patch_added():
    """Rule: when a file fails to collect at base, its tests are F2P only if the test patch added them
    (and they pass at head); the file's other tests go to unknown_at_base, in neither list."""
    added_ok = f"{NEW}::test_added"
    old = f"{NEW}::test_already_there"
    added_fails = f"{NEW}::test_added_but_fails"
    base = [{A: P}] * 2  # nothing from NEW: it did not collect
    head = [{A: P, added_ok: P, old: P, added_fails: F}] * 3
    got = labels(
        base,
        head,
        base_collection_errors=[NEW],
        changed_tests=[added_ok, added_fails],
    )
    assert got.fail_to_pass == [added_ok]
    assert got.pass_to_pass == [A]
    assert got.unknown_at_base == [old]
    assert got.fallback_used is True
    assert added_fails not in got.fail_to_pass + got.pass_to_pass + got.unknown_at_base


def test_collection_error_fallback_matches_parametrized_ids_without_their_params():
    """Rule: the test patch adds functions (`::test_p`); pytest reports `::test_p[...]`, matched via
    strip_params, brackets and spaces inside the parameters included."""
    params = [f"{NEW}::test_p[1]", f"{NEW}::test_p[a b-[c]]", f"{NEW}::TestK::test_m[x]"]
    other = f"{NEW}::test_q[1]"
    got = labels(
        [{A: P}] * 2,
        [dict.fromkeys([A, *params, other], P)] * 3,
        base_collection_errors=[NEW],
        changed_tests=[f"{NEW}::test_p", f"{NEW}::TestK::test_m"],
    )
    assert got.fail_to_pass == sorted(params)
    assert got.unknown_at_base == [other]
    assert got.fallback_used


def test_collection_error_named_by_class_node_id_marks_its_file():
    """Rule: a class that failed to collect (`file::TestK`) puts that file's missing tests in the fallback."""
    test = f"{NEW}::TestK::test_m"
    got = labels(
        [{A: P}] * 2,
        [{A: P, test: P}] * 3,
        base_collection_errors=[f"{NEW}::TestK"],
        changed_tests=[],
    )
    assert got.unknown_at_base == [test]
    assert got.fail_to_pass == []


def test_collection_error_in_one_file_does_not_touch_other_files():
    """Rule: the fallback applies only to the file that failed to collect; other files keep plain labels."""
    other_new = "tests/api/test_other.py::test_fresh"
    got = labels(
        [{A: F}] * 2,
        [{A: P, other_new: P, f"{NEW}::test_x": P}] * 3,
        base_collection_errors=[NEW],
        changed_tests=[],
    )
    assert got.fail_to_pass == sorted([A, other_new])
    assert got.unknown_at_base == [f"{NEW}::test_x"]
    assert not got.fallback_used


def test_fallback_test_collected_at_base_in_only_one_run_is_flaky():
    """Rule: a file that failed to collect in one base run but collected in another is flaky, not rescued."""
    test = f"{NEW}::test_added"
    got = labels(
        [{A: P}, {A: P, test: F}],
        [{A: P, test: P}] * 3,
        base_collection_errors=[NEW],
        changed_tests=[test],
    )
    assert got.flaky == [test]
    assert got.fail_to_pass == []


# ------------------------------------------------ extract_labels, the published v0.1 rule (reproduction only)


def published(base, head, **kw):
    return extract_labels(base, head, rule="published-v0.1", **kw)


def test_published_rule_never_makes_a_test_missing_at_base_fail_to_pass():
    """Rule (published harness/extract.py): F2P = base_fail & head_pass, so a test of a file that did not
    collect at base is in neither list, even one the test patch added; ours would make it F2P."""
    added = f"{NEW}::test_added"
    base, head = [{A: F, B: P}] * 2, [{A: P, B: P, added: P}] * 3
    kw = {"base_collection_errors": [NEW], "changed_tests": [added]}
    got = published(base, head, **kw)
    assert got.fail_to_pass == [A] and got.pass_to_pass == [B]
    assert got.unknown_at_base == [added] and not got.fallback_used
    assert labels(base, head, **kw).fail_to_pass == sorted([A, added])  # the project's rule, for contrast


def test_published_rule_falls_back_only_when_the_base_run_left_nothing_but_collection_errors():
    """Rule (published extract.py's fallback): when the base side had collection errors and no test outcome at
    all, and F2P is empty, the candidates (the test patch's `+def test_*` lines, ids compared exactly) that pass
    at head become F2P and every other head pass P2P. Base outcomes, even failing ones, or no collection error:
    no fallback."""
    added, old = f"{NEW}::test_added", f"{NEW}::test_old"
    head = [{A: P, added: P, old: P, f"{added}[1]": P}] * 3
    got = published([{}] * 2, head, changed_tests=[added], base_collection_errors=[NEW])
    assert got.fail_to_pass == [added] and got.pass_to_pass == sorted([A, old, f"{added}[1]"])
    assert got.fallback_used
    for base, errors in (([{A: F}] * 2, [NEW]), ([{}] * 2, [])):
        got = published(base, head, changed_tests=[added], base_collection_errors=errors)
        assert added not in got.fail_to_pass and not got.fallback_used


def test_published_rule_where_pytest_stopped_at_a_collection_error():
    """Rule (`collection_errors = "stop"`, pytest's default, the published template runs): a collection error at
    base stopped the session before any test ran, so the base side is its errors alone and the fallback decides
    (#2104: 3 tests rewritten in a collecting file failed at base in our runs, which continue; the published
    list is the 3 tests the patch adds to the two files that did not collect)."""
    rewritten, added = f"{B}_rewritten", f"{NEW}::test_added"
    base = [{A: P, rewritten: F}] * 2
    head = [{A: P, rewritten: P, added: P}] * 3
    kw = {"changed_tests": [added], "base_collection_errors": [NEW]}
    assert published(base, head, **kw).fail_to_pass == [rewritten]
    got = published(base, head, collection_errors="stop", **kw)
    assert got.fail_to_pass == [added] and got.pass_to_pass == sorted([A, rewritten]) and got.fallback_used
    assert published(base, head, collection_errors="stop", changed_tests=[added]).fail_to_pass == [rewritten]
    with pytest.raises(ValueError, match="'pbench' rule continues"):
        labels(base, head, collection_errors="stop")


def test_the_published_parser_reads_def_lines_only():
    """Rule (published harness/test_patch_parser.py): a `+def test_*(` line of a `+++ b/` file, prefix removed,
    with its `+class Test*` of the same hunk; a body rewritten under an unchanged `def` line is no candidate."""
    from tasks_lib.formats.changed_tests import def_line_tests

    patch = (
        "diff --git a/backend/tests/test_x.py b/backend/tests/test_x.py\n--- a/backend/tests/test_x.py\n"
        "+++ b/backend/tests/test_x.py\n@@ -1,3 +1,9 @@\n+class TestNew:\n+    def test_in_class(self):\n"
        "+        pass\n def test_kept():\n-    assert 1\n+    assert 2\n@@ -20 +26,2 @@\n"
        "+    def test_other_hunk(self):\n+def test_top(client):\n"
    )
    assert def_line_tests(patch, "backend/") == {
        "tests/test_x.py::test_in_class",
        "tests/test_x.py::TestNew::test_in_class",
        "tests/test_x.py::test_other_hunk",
        "tests/test_x.py::test_top",
    }


def test_published_rule_still_excludes_flaky_tests_and_refuses_unknown_rules():
    got = published([{A: F}, {A: P}], [{A: P}] * 3)
    assert got.flaky == [A] and got.fail_to_pass == []
    with pytest.raises(ValueError, match="labelling rule"):
        extract_labels([{A: F}] * 2, [{A: P}] * 3, rule="swe-bench")


# --------------------------------------------------------------------------- grade


def run(outcomes, f2p=(A,), p2p=(B,), status=RunStatus.COMPLETED, suite_ran=True, **kw) -> Grade:
    return grade(list(f2p), list(p2p), status, outcomes, suite_ran=suite_ran, **kw)


def test_every_required_test_passed_resolves():
    """Rule: resolved = every F2P and every P2P passed; counts are per list."""
    g = run({A: P, B: P, C: F})  # C is not graded: only the lists count
    assert g.resolved and g.status == Status.RESOLVED
    assert (g.f2p_passed, g.f2p_total, g.p2p_passed, g.p2p_total) == (1, 1, 1, 1)
    assert g.failed_tests == []


def test_missing_test_counts_as_failed():
    """Rule: a required test missing from the results counts as failed (deleting a test cannot help)."""
    g = run({A: P})
    assert not g.resolved and g.status == Status.TESTS_FAILED
    assert g.failed_tests == [B]
    assert (g.p2p_passed, g.p2p_total) == (0, 1)


def test_skipped_fail_to_pass_test_counts_as_failed():
    """Rule: a skipped FAIL_TO_PASS test counts as failed (a patch must not turn a test into a skip)."""
    g = run({A: S, B: P})
    assert not g.resolved and g.status == Status.TESTS_FAILED
    assert g.failed_tests == [A]
    assert g.f2p_passed == 0


@pytest.mark.parametrize("outcome", [XP, XF, E, F, S])
def test_only_passed_counts_as_passed(outcome):
    """Rule: xpassed / xfailed (and error, failed, skipped) are not `passed` for grading."""
    g = run({A: outcome, B: P})
    assert not g.resolved
    assert g.f2p_passed == 0 and g.failed_tests == [A]


def test_no_evidence_the_suite_ran_is_not_resolved():
    """Rule: without evidence that the suite ran, even all-passed outcomes are not a pass (TESTS_FAILED)."""
    g = run({A: P, B: P}, suite_ran=False)
    assert not g.resolved
    assert g.status == Status.TESTS_FAILED
    assert "no evidence" in g.note


def test_exit_code_mismatch_is_not_resolved():
    """Rule: an exit code that contradicts the parsed results is never a pass, and says why."""
    g = run({A: P, B: P}, exit_code_mismatch=True)
    assert not g.resolved
    assert g.status == Status.TESTS_FAILED
    assert "exit code" in g.note


@pytest.mark.parametrize(
    ("run_status", "status"),
    [
        (RunStatus.PATCH_APPLY_FAILED, Status.PATCH_APPLY_FAILED),
        (RunStatus.IMAGE_BUILD_FAILED, Status.IMAGE_BUILD_FAILED),
        (RunStatus.TIMEOUT, Status.TIMEOUT),
        (RunStatus.INFRA_ERROR, Status.INFRA_ERROR),
    ],
)
def test_engine_run_statuses_map_to_verdict_statuses(run_status, status):
    """Rule: an engine failure becomes its own verdict status, never resolved, even with passing outcomes."""
    g = run({A: P, B: P}, status=run_status)
    assert not g.resolved
    assert g.status == status


def test_infra_run_statuses_are_infra_verdicts_and_patch_apply_is_not():
    """Rule: infrastructure trouble is reported in its own column; a patch that does not apply is the
    model's failure, not infrastructure."""
    for rs in (RunStatus.IMAGE_BUILD_FAILED, RunStatus.INFRA_ERROR):
        g = run({}, status=rs)
        assert g.status in INFRA_STATUSES and g.blame == Blame.HARNESS and g.infra_failure
    g = run({}, status=RunStatus.PATCH_APPLY_FAILED)
    assert g.status not in INFRA_STATUSES and g.blame == Blame.PATCH and not g.infra_failure


def test_blame_follows_the_run_a_timeout_is_the_patchs_once_its_code_ran():
    """Rule: once the patch's code has started, a timeout or an output over the cap is the patch's failure
    (exit 1, not retried); a build failure is the harness's unless the run says the patch's lock caused it."""
    timeout = run({}, status=RunStatus.TIMEOUT, blame="patch")
    assert timeout.status == Status.TIMEOUT and timeout.blame == Blame.PATCH and not timeout.infra_failure
    assert run({}, status=RunStatus.TIMEOUT).blame == Blame.PATCH  # a timeout defaults to the patch
    flood = run({A: P, B: P}, status=RunStatus.OUTPUT_LIMIT)
    assert not flood.resolved and flood.blame == Blame.PATCH and "cap" in flood.note
    build = run({}, status=RunStatus.IMAGE_BUILD_FAILED, blame="patch")
    assert build.status == Status.IMAGE_BUILD_FAILED and not build.infra_failure


def test_tampering_is_never_a_pass_and_the_verdict_says_what_was_seen():
    """Rule: a run in which the guards saw tampering is never resolved, whatever the outcomes, and the note
    and the grade's tampering list name what was seen."""
    seen = "backend/conftest.py appeared after the prestart steps (runner-relevant file)"
    g = run({A: P, B: P}, tampering=[seen])
    assert not g.resolved and g.status == Status.TESTS_FAILED and g.blame == Blame.PATCH
    assert g.tampering == [seen] and seen in g.note
    failing = run({A: F, B: P}, tampering=[seen])
    assert not failing.resolved and failing.tampering == [seen]


def test_a_must_pass_witness_that_failed_counts_only_against_a_pass():
    """Rule: a must-pass witness that failed is tampering in a run that would otherwise resolve; a patch that
    breaks the whole suite fails that witness honestly and stays a plain tests_failed."""
    doubt = ["the witness test 'test_x' of tests/test_x.py (must pass) was reported failed"]
    assert run({A: P, B: P}, witness_doubts=doubt).tampering == doubt
    plain = run({A: F, B: P}, witness_doubts=doubt)
    assert plain.status == Status.TESTS_FAILED and plain.tampering == []


def test_prestart_failure_is_tests_failed():
    """Rule: prestart steps that fail (e.g. a migration the patch broke) mean the suite never ran:
    tests_failed, the model's failure, with a note."""
    g = run({A: P, B: P}, status=RunStatus.PRESTART_FAILED)
    assert not g.resolved
    assert g.status == Status.TESTS_FAILED
    assert "prestart" in g.note
    assert g.status not in INFRA_STATUSES


def test_required_tests_missing_because_their_file_did_not_collect():
    """Rule: required tests missing because their file failed to collect give TEST_COLLECTION_FAILED."""
    g = run({B: P}, f2p=(D,), collection_errors=["tests/test_users.py"])
    assert not g.resolved
    assert g.status == Status.TEST_COLLECTION_FAILED
    assert g.failed_tests == [D]


def test_collection_error_in_an_unrelated_file_is_plain_tests_failed():
    """Rule: a collection error elsewhere does not relabel a required test that simply failed."""
    g = run({A: F, B: P}, collection_errors=["tests/test_users.py"])
    assert g.status == Status.TESTS_FAILED


def test_collection_error_beside_all_passing_required_tests_still_resolves():
    """Rule: only the required tests decide; a broken unrelated file does not sink a resolved instance."""
    g = run({A: P, B: P}, collection_errors=["tests/test_unrelated.py"])
    assert g.resolved


def test_no_tests_at_all_is_not_resolved():
    """Rule: an instance with nothing to grade can never be resolved (an empty list is no evidence)."""
    g = run({A: P}, f2p=(), p2p=())
    assert not g.resolved
    assert g.status == Status.TESTS_FAILED
    assert (g.f2p_total, g.p2p_total) == (0, 0)


# --------------------------------------------------------------------------- combine


def test_combine_needs_both_sides_resolved():
    """Rule: resolved only when every side is resolved; counts and failed tests add up."""
    ok = run({A: P, B: P})
    bad = run({A: P}, f2p=(C,), p2p=(D,))
    both = combine([ok, ok])
    assert both.resolved and both.status == Status.RESOLVED
    assert (both.f2p_passed, both.f2p_total) == (2, 2)
    mixed = combine([ok, bad])
    assert not mixed.resolved
    assert mixed.status == Status.TESTS_FAILED
    assert (mixed.f2p_passed, mixed.f2p_total, mixed.p2p_passed, mixed.p2p_total) == (1, 2, 1, 2)
    assert mixed.failed_tests == [C, D]


def test_combine_takes_the_status_of_the_first_failing_side():
    """Rule: the first non-resolved side (backend before frontend) names the combined status."""
    ok = run({A: P, B: P})
    timeout = run({}, status=RunStatus.TIMEOUT)
    failed = run({A: F, B: P})
    assert combine([timeout, failed]).status == Status.TIMEOUT
    assert combine([failed, timeout]).status == Status.TESTS_FAILED
    assert combine([ok, timeout]).status == Status.TIMEOUT
    assert combine([ok, failed]).status == Status.TESTS_FAILED


def test_combine_keeps_every_note():
    """Rule: a side's explanation (e.g. no evidence the suite ran) survives combining."""
    silent = run({A: P, B: P}, suite_ran=False)
    ok = run({A: P, B: P})
    combined = combine([ok, silent])
    assert "no evidence" in combined.note
    assert not combined.resolved


def test_combine_of_nothing_is_an_error():
    """Rule: no sides means nothing was graded: an error, never a resolved verdict."""
    with pytest.raises(ValueError):
        combine([])


def test_playwright_ids_use_their_spec_file_for_the_collection_fallback():
    """A spec file that failed to load at base: its tests are F2P only when the test patch added them, exactly as
    for pytest files (the file of `tests/a.spec.js:3:5 › T › t` is `tests/a.spec.js`)."""
    added = "tests/new.spec.js:3:5 › New › works"
    old = "tests/new.spec.js:9:5 › New › was there"
    head = [{added: Outcome.PASSED, old: Outcome.PASSED}] * 3
    base = [{}] * 2
    labels = extract_labels(base, head, base_collection_errors=["tests/new.spec.js"], changed_tests=[added])
    assert labels.fail_to_pass == [added] and labels.unknown_at_base == [old] and labels.fallback_used


def test_report_disagreement_is_never_a_pass():
    g = grade(
        ["t::a"],
        [],
        RunStatus.COMPLETED,
        {"t::a": Outcome.PASSED},
        suite_ran=True,
        report_disagreements=["t::a: passed in JUnit, failed in pytest's summary"],
    )
    assert not g.resolved and g.status == Status.TESTS_FAILED
    assert "disagree" in g.note and "t::a" in g.note
