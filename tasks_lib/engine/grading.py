"""Pure grading: FAIL_TO_PASS / PASS_TO_PASS from repeated runs, and the verdict of one scored run.

No I/O here. Both functions take per-test outcomes keyed by node id and return plain records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tasks_lib.core.constants import PASSING_OUTCOMES, Blame, Outcome, RunStatus, Status, default_blame
from tasks_lib.formats.changed_tests import strip_params

MISSING = "missing"

# How FAIL_TO_PASS treats a test with no base outcome (a season's `extraction.labels`):
#   "pbench": a test of a file that failed to collect at base is FAIL_TO_PASS when the test patch adds or
#       rewrites it and it passes at head (as written it cannot run at base); the file's other tests are set
#       aside (`unknown_at_base`);
#   "published-v0.1": the published PrototypeBench v0.1 extraction (prototypebench/prototypebench,
#       harness/extract.py): FAIL_TO_PASS needs a failing base outcome, so a test missing at base is never one;
#       only when the base run left nothing but file-level collection errors and nothing is FAIL_TO_PASS, the
#       tests whose `def` line the test patch adds (its parser: `changed_tests.def_line_tests`) that pass at head
#       are. For reproducing the published corpus, never a default.
LABEL_RULES = ("pbench", "published-v0.1")
# What the reproduced harness's pytest did on a collection error at base (a season's
# `extraction.collection_errors`): "continue" (ours always runs on, `--continue-on-collection-errors`; the
# published mcp-context-forge runs, under pytest-xdist, did too) or "stop" (pytest's default, the published
# template runs: the session stops before any test runs, so the base side is its file-level errors alone).
COLLECTION_ERRORS = ("continue", "stop")


def file_of(test_id: str) -> str:
    """The test file of a pytest node id (`path::name`) or a Playwright id (`path:line:col › title`)."""
    if "::" in test_id or " › " not in test_id:
        return test_id.split("::", 1)[0]
    return test_id.split(" › ", 1)[0].rsplit(":", 2)[0]


@dataclass(frozen=True)
class Labels:
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    flaky: list[str]
    # Tests whose base outcome is unknown (their file failed to collect at base) and that the test patch
    # neither adds nor rewrites: neither list can honestly hold them.
    unknown_at_base: list[str] = field(default_factory=list)
    fallback_used: bool = False


def _stable(runs: Sequence[Mapping[str, Outcome]], test_id: str) -> str | None:
    """The one outcome a test had in every run, or None when it changed (missing counts as an outcome)."""
    seen = {str(run.get(test_id, MISSING)) for run in runs}
    return seen.pop() if len(seen) == 1 else None


def _stable_pairs(base_runs, head_runs, flaky: list[str]):
    """(test id, head outcome, base outcome) of every test whose outcome held over each side's runs, by id; the
    others are appended to `flaky`."""
    for test_id in sorted(set().union(*head_runs, *base_runs)):
        head, base = _stable(head_runs, test_id), _stable(base_runs, test_id)
        if head is None or base is None:
            flaky.append(test_id)
        else:
            yield test_id, head, base


def extract_labels(
    base_runs: Sequence[Mapping[str, Outcome]],
    head_runs: Sequence[Mapping[str, Outcome]],
    *,
    base_collection_errors: Iterable[str] = (),
    changed_tests: Iterable[str] = (),
    rule: str = "pbench",
    collection_errors: str = "continue",
) -> Labels:
    """FAIL_TO_PASS = fail -> pass, PASS_TO_PASS = pass -> pass, over repeated runs of each side.

    Any test whose outcome changes between runs of the same side is flaky and excluded from both lists.
    When a test file fails to collect at base, its tests have no base outcome: the fallback keeps those
    the test patch adds or rewrites (`changed_tests`: as written, they cannot run at base) when they pass at
    head, and sets the rest aside (unchanged tests whose only tie to the PR may be the file's broken import).
    `rule` is one of LABEL_RULES (above); "published-v0.1" answers what the published harness would have, with
    `changed_tests` its fallback's candidates and `collection_errors` (COLLECTION_ERRORS) how its pytest ran on.
    """
    if not head_runs or not base_runs:
        raise ValueError("extraction needs at least one run of each side")
    if rule not in LABEL_RULES:
        raise ValueError(f"labelling rule: one of {', '.join(LABEL_RULES)}, got {rule!r}")
    if collection_errors not in COLLECTION_ERRORS:
        raise ValueError(
            f"collection_errors: one of {', '.join(COLLECTION_ERRORS)}, got {collection_errors!r}"
        )
    if rule == "published-v0.1":
        errors = list(base_collection_errors)
        if errors and collection_errors == "stop":
            base_runs = [{} for _ in base_runs]  # the session stopped at the errors: no test ran at base
        return _published_labels(base_runs, head_runs, set(changed_tests), bool(errors))
    if collection_errors != "continue":
        raise ValueError(
            "collection_errors = 'stop' reproduces a published harness: the 'pbench' rule continues"
        )
    broken_files = {file_of(e) for e in base_collection_errors}
    changed = {strip_params(t) for t in changed_tests}
    f2p, p2p, flaky, unknown = [], [], [], []
    fallback_used = False
    for test_id, head, base in _stable_pairs(base_runs, head_runs, flaky):
        if head not in PASSING_OUTCOMES:
            continue
        if base in PASSING_OUTCOMES:
            p2p.append(test_id)
        elif base == MISSING and file_of(test_id) in broken_files:
            if strip_params(test_id) in changed:
                f2p.append(test_id)
                fallback_used = True
            else:
                unknown.append(test_id)
        else:
            f2p.append(test_id)
    return Labels(f2p, p2p, flaky, unknown, fallback_used)


def _published_labels(base_runs, head_runs, candidates: set[str], collection_errors: bool) -> Labels:
    """The published v0.1 rule over repeated runs (flaky tests excluded as in ours): FAIL_TO_PASS = a stable
    failing base outcome and a stable pass at head; a test missing at base is in neither list, except through
    the published fallback (the base side had collection errors and no test outcome at all, and nothing is
    FAIL_TO_PASS: the `candidates` passing at head, ids compared exactly). Its fallback then makes PASS_TO_PASS
    every other test passing at head, as the published one did."""
    only_errors = collection_errors and not any(base_runs)
    f2p, p2p, flaky, unknown, head_pass = [], [], [], [], []
    base_passed = False
    for test_id, head, base in _stable_pairs(base_runs, head_runs, flaky):
        base_passed = base_passed or base in PASSING_OUTCOMES
        if head not in PASSING_OUTCOMES:
            continue
        head_pass.append(test_id)
        if base in PASSING_OUTCOMES:
            p2p.append(test_id)
        elif base == MISSING:
            unknown.append(test_id)
        else:
            f2p.append(test_id)
    if not f2p and not base_passed and only_errors:
        recovered = [t for t in head_pass if t in candidates]
        if recovered:
            rest = [t for t in head_pass if t not in set(recovered)]
            return Labels(recovered, rest, flaky, [], True)
    return Labels(f2p, p2p, flaky, unknown, False)


# A failure whose message says the test reached for the network outside the run (every run has none).
_NETWORK = re.compile(
    r"ENOTFOUND|EAI_AGAIN|getaddrinfo|Name or service not known|Temporary failure in name resolution|"
    r"net::ERR_(NAME_NOT_RESOLVED|INTERNET_DISCONNECTED|NETWORK_ACCESS_DENIED|ADDRESS_UNREACHABLE)|"
    r"Network is unreachable|nodename nor servname|NameResolutionError|Failed to resolve '",
    re.I,
)


def network_line(text: str) -> str:
    """The first line of a log (e.g. the live backend's, behind a Playwright run) that says the outside network
    was wanted, whitespace-collapsed and cut to 200 characters; "" when none does."""
    for line in text.splitlines():
        if _NETWORK.search(line):
            return " ".join(line.split())[:200]
    return ""


def cannot_run_here(
    head_runs: list[dict], messages: dict[str, str], changed, service_network: Sequence[str] = ()
) -> list[dict]:
    """The tests the test patch adds or changes (`changed`: ids, or pytest ids without parameters) that cannot
    pass here, each with its reason: skipped in every head run (`skipped: <why>`, e.g. a spec that needs an API
    key); failing in every head run for want of the outside network (`network: <message>`), said by the test's
    own message or, when every head run's live backend said so (`service_network`: per head run, the
    `network_line` of its backend's log, "" for none), by it (a spec whose backend fetched a page); failing
    in every head run for any other reason (`fails_at_head: <message>`: the reference solution does not make it
    pass here). Neither list holds them; the funnel counts them by reason, so that no test is lost silently.
    Sorted by test."""
    wanted = set(changed)
    out = []
    for test_id in sorted({t for run in head_runs for t in run}):
        if test_id not in wanted and strip_params(test_id) not in wanted:
            continue
        seen = {str(run.get(test_id, MISSING)) for run in head_runs}
        whole = " ".join((messages.get(test_id) or "").split())
        message = whole[:200]  # recorded; the whole message is searched (the network word often comes late)
        if seen == {str(Outcome.SKIPPED)}:
            out.append({"test": test_id, "reason": f"skipped: {message or 'no reason given'}"})
        elif not seen <= {str(Outcome.FAILED), str(Outcome.ERROR)}:
            continue
        elif _NETWORK.search(whole):
            out.append({"test": test_id, "reason": f"network: {message}"})
        elif service_network and all(service_network):
            said = f"the live backend: {service_network[0]}"
            out.append(
                {"test": test_id, "reason": f"network: {said} (the test: {message[:100] or 'no message'})"}
            )
        else:
            out.append({"test": test_id, "reason": f"fails_at_head: {message or 'no message'}"})
    return out


@dataclass(frozen=True)
class Grade:
    resolved: bool
    status: Status
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int
    failed_tests: list[str]
    note: str = ""
    blame: Blame = Blame.NONE
    # What the run's guards saw (never a pass): the verdict says it.
    tampering: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.blame == Blame.NONE and not self.resolved:
            object.__setattr__(self, "blame", default_blame(self.status))

    @property
    def infra_failure(self) -> bool:
        return self.blame == Blame.HARNESS


# A run status that names a verdict status is that status (one vocabulary: patch_apply_failed,
# image_build_failed, timeout, infra_error); prestart_failed and output_limit have their own rules below.
_SAME_NAME = {str(s) for s in Status} & {str(r) for r in RunStatus}


def grade(
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    run_status: RunStatus,
    outcomes: Mapping[str, Outcome],
    *,
    suite_ran: bool,
    collection_errors: Sequence[str] = (),
    exit_code_mismatch: bool = False,
    report_disagreements: Sequence[str] = (),
    tampering: Sequence[str] = (),
    witness_doubts: Sequence[str] = (),
    blame: str = "",
) -> Grade:
    """Verdict of one side. A test missing from the results fails; a skipped test fails; no evidence
    that the suite ran is never a pass; an exit code that contradicts the parsed results is never a pass;
    a run in which the guards saw tampering is never a pass, and the verdict says what they saw."""
    f2p_ok = [t for t in fail_to_pass if outcomes.get(t) in PASSING_OUTCOMES]
    p2p_ok = [t for t in pass_to_pass if outcomes.get(t) in PASSING_OUTCOMES]
    failed = [t for t in [*fail_to_pass, *pass_to_pass] if outcomes.get(t) not in PASSING_OUTCOMES]
    counts = dict(
        f2p_passed=len(f2p_ok),
        f2p_total=len(fail_to_pass),
        p2p_passed=len(p2p_ok),
        p2p_total=len(pass_to_pass),
        failed_tests=failed,
    )
    seen = list(dict.fromkeys(tampering))
    g = _grade(
        run_status,
        outcomes,
        counts,
        failed,
        suite_ran,
        collection_errors,
        exit_code_mismatch,
        report_disagreements,
        blame,
    )
    if g.resolved and witness_doubts:
        seen += list(witness_doubts)
    if not seen:
        return g
    note = "tampering: " + "; ".join(seen[:3]) + (f" (+{len(seen) - 3} more)" if len(seen) > 3 else "")
    status = g.status if not g.resolved else Status.TESTS_FAILED
    return Grade(
        False,
        status,
        **counts,
        note="; ".join(filter(None, [note, g.note if not g.resolved else ""])),
        blame=Blame.PATCH,
        tampering=seen,
    )


def _grade(
    run_status,
    outcomes,
    counts,
    failed,
    suite_ran,
    collection_errors,
    exit_code_mismatch,
    report_disagreements,
    blame,
) -> Grade:
    if run_status == RunStatus.OUTPUT_LIMIT:
        return Grade(
            False,
            Status.TESTS_FAILED,
            **counts,
            note="the output went over the cap: the run was stopped",
            blame=Blame.PATCH,
        )
    if str(run_status) in _SAME_NAME:
        status = Status(str(run_status))
        return Grade(False, status, **counts, blame=Blame(blame) if blame else default_blame(status))
    if run_status == RunStatus.PRESTART_FAILED:
        return Grade(False, Status.TESTS_FAILED, **counts, note="prestart steps failed: the suite never ran")
    broken = {file_of(e) for e in collection_errors}
    if failed and any(outcomes.get(t) is None and file_of(t) in broken for t in failed):
        return Grade(False, Status.TEST_COLLECTION_FAILED, **counts, note="required tests failed to collect")
    if not suite_ran:
        return Grade(False, Status.TESTS_FAILED, **counts, note="no evidence that the test suite ran")
    if report_disagreements:
        return Grade(
            False,
            Status.TESTS_FAILED,
            **counts,
            note="the report file and the test output the runner read disagree: "
            + "; ".join(report_disagreements[:3]),
        )
    if exit_code_mismatch:
        return Grade(
            False, Status.TESTS_FAILED, **counts, note="test exit code contradicts the parsed results"
        )
    if failed:
        return Grade(False, Status.TESTS_FAILED, **counts)
    if not counts["f2p_total"] and not counts["p2p_total"]:
        return Grade(False, Status.TESTS_FAILED, **counts, note="no tests to grade")
    return Grade(True, Status.RESOLVED, **counts)


def combine(grades: Sequence[Grade]) -> Grade:
    """Both sides must pass. The first non-resolved side (backend before frontend) names the status and
    the blame."""
    if not grades:
        raise ValueError("nothing to combine")
    worst = next((g for g in grades if not g.resolved), grades[0])
    resolved = all(g.resolved for g in grades)
    return Grade(
        resolved=resolved,
        status=worst.status if not resolved else Status.RESOLVED,
        f2p_passed=sum(g.f2p_passed for g in grades),
        f2p_total=sum(g.f2p_total for g in grades),
        p2p_passed=sum(g.p2p_passed for g in grades),
        p2p_total=sum(g.p2p_total for g in grades),
        failed_tests=[t for g in grades for t in g.failed_tests],
        note="; ".join(g.note for g in grades if g.note),
        blame=worst.blame if not resolved else Blame.NONE,
        tampering=[t for g in grades for t in g.tampering],
    )
