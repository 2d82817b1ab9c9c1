"""One home for the project's enums and fixed names (statuses, outcomes, tiers, labels)."""

from __future__ import annotations

from enum import StrEnum

# The versions that decide which cached results may be reused; what each is part of, when to bump it and
# every bump's reason: CHANGELOG.md (a bump without its line there fails the unit suite).
HARNESS_VERSION = "0.4.0"
EXTRACTION_VERSION = "7"
JUDGE_VERSION = "2"
SCHEMA_VERSION = "0.1"

# Every container, network and volume the engine creates carries this label, so leftovers
# can be found (and removed) by `pbench cleanup` and by the test suite's leak check.
LABEL = "io.prototypebench.managed"
LABEL_RUN = "io.prototypebench.run"
# Who started the run (PBENCH_OWNER, default "pbench"): a test session checks for leaks of its own objects only.
LABEL_OWNER = "io.prototypebench.owner"


class Status(StrEnum):
    """Verdict status of one evaluated instance (ARCHITECTURE.md)."""

    RESOLVED = "resolved"
    TESTS_FAILED = "tests_failed"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    PATCH_TOUCHES_TESTS = "patch_touches_tests"
    PATCH_INVALID = "patch_invalid"
    IMAGE_BUILD_FAILED = "image_build_failed"
    TEST_COLLECTION_FAILED = "test_collection_failed"
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"
    # The predictions hold nothing for a selected instance: unresolved, counted in the denominator (as
    # SWE-bench's leaderboards divide by the dataset), never run.
    NO_PREDICTION = "no_prediction"


# Statuses that say nothing about the model unless the run charged them to the patch: retried, then reported
# in their own column. A timeout is the patch's (its code had started: a hang of the harness's own services
# is an infra_error); an image that fails to build is the harness's, except a patched lock that fails while
# the base lock builds. What a run is charged to is its `blame`.
INFRA_STATUSES = frozenset({Status.INFRA_ERROR, Status.IMAGE_BUILD_FAILED})


class Blame(StrEnum):
    """Who an unresolved verdict is charged to."""

    NONE = ""  # resolved
    PATCH = "patch"  # a normal, meaningful result (exit 1)
    HARNESS = "harness"  # the harness could not run (exit 2, retried)


def default_blame(status: Status) -> Blame:
    if status == Status.RESOLVED:
        return Blame.NONE
    return Blame.HARNESS if status in INFRA_STATUSES else Blame.PATCH


class RunStatus(StrEnum):
    """What happened to one engine run (one side, one attempt), before any grading."""

    COMPLETED = "completed"  # the test command ran to its end (whatever its exit code)
    PATCH_APPLY_FAILED = "patch_apply_failed"
    PRESTART_FAILED = "prestart_failed"
    IMAGE_BUILD_FAILED = "image_build_failed"
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"  # what the code under test printed went over the cap: the run was stopped
    INFRA_ERROR = "infra_error"


class AgentOutcome(StrEnum):
    """What happened to one agent run of `pbench agent run` (before any scoring). Every outcome but
    `harness_error` leaves a prediction: the diff of what the agent left in its checkout, possibly empty."""

    COMPLETED = "completed"  # the command exited 0
    FAILED = "failed"  # it exited non-zero (or was killed by a signal of its own)
    TIMEOUT = "timeout"  # stopped at the time limit
    DIFF_FAILED = "diff_failed"  # its change could not be read back (it broke the checkout's .git): empty
    HARNESS_ERROR = "harness_error"  # the checkout could not be made: no prediction, a rerun tries again


class Outcome(StrEnum):
    """Per-test outcome, as pytest (or Playwright) reports it."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    XPASSED = "xpassed"


# Worst first: when one test is reported more than once (several entries, several projects), the worst wins.
OUTCOME_SEVERITY: tuple[Outcome, ...] = (
    Outcome.ERROR,
    Outcome.FAILED,
    Outcome.SKIPPED,
    Outcome.XFAILED,
    Outcome.XPASSED,
    Outcome.PASSED,
)
OUTCOME_RANK = {outcome: len(OUTCOME_SEVERITY) - i for i, outcome in enumerate(OUTCOME_SEVERITY)}

# Only these count as "the test passed" for FAIL_TO_PASS / PASS_TO_PASS and for grading.
# A skipped test never counts: a patch must not be able to turn a required test into a skip.
PASSING_OUTCOMES = frozenset({Outcome.PASSED})


class ExtractionStatus(StrEnum):
    OK = "ok"
    NO_FAIL_TO_PASS = "no_fail_to_pass"
    TEST_ONLY = "test_only"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    IMAGE_BUILD_FAILED = "image_build_failed"
    TEST_COLLECTION_FAILED = "test_collection_failed"
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"
    # The reference solution's own runs trip the judge's guards (a plugin replacing the runner's functions,
    # files the runner reads written at run time): such a task could not be graded fairly.
    TAMPERING_SEEN = "tampering_seen"
    INFRA_ERROR = "infra_error"


class StackDomain(StrEnum):
    BACKEND_ONLY = "backend_only"
    FRONTEND_ONLY = "frontend_only"
    FULLSTACK = "fullstack"


class Tier(StrEnum):
    PUBLIC = "public"
    HELD_OUT = "held_out"
    INTERNAL_ONLY = "internal_only"


class Side(StrEnum):
    BACKEND = "backend"
    FRONTEND = "frontend"


class ExitCode:
    """Exit codes of single-instance commands (sister-harness convention)."""

    RESOLVED = 0
    NOT_RESOLVED = 1
    HARNESS_ERROR = 2
