"""Stage 4 of curation: FAIL_TO_PASS / PASS_TO_PASS from executed tests, through the engine.

Base side: base commit + test patch. Head side: base commit + reference patch + test patch. The head side
runs at least three times and the base side at least twice; a test whose outcome changes is flaky and
lands in neither list. Head-1 runs the side's whole scope; a Playwright side's later runs (head and base) select
the tests that passed in every head run so far, the shape evaluation runs (the others are in neither list
whatever their base outcome). Labels come from the set algebra in `grading.extract_labels`, never by hand.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from tasks_lib import engine
from tasks_lib.core.constants import PASSING_OUTCOMES, ExtractionStatus, RunStatus, Side
from tasks_lib.curation import resume
from tasks_lib.engine import grading
from tasks_lib.formats import patches
from tasks_lib.formats.changed_tests import changed_spec_tests, changed_test_functions, def_line_tests
from tasks_lib.sources import gitops, test_scope
from tasks_lib.sources.record import SourceRecord

# A run status that is also an extraction status keeps its name (patch_apply_failed, image_build_failed,
# timeout, output_limit, infra_error); prestart_failed of the reference solution is infrastructure.
_BY_VALUE = {str(s) for s in ExtractionStatus} - {"prestart_failed"}

EXTRACTION_SCHEMA = pa.schema(
    [
        ("number", pa.int64()),
        ("status", pa.string()),
        ("base_commit", pa.string()),
        ("head_commit", pa.string()),
        ("f2p_count", pa.int64()),
        ("p2p_count", pa.int64()),
        ("backend_fail_to_pass", pa.list_(pa.string())),
        ("backend_pass_to_pass", pa.list_(pa.string())),
        ("frontend_fail_to_pass", pa.list_(pa.string())),
        ("frontend_pass_to_pass", pa.list_(pa.string())),
        ("sides", pa.list_(pa.string())),
        ("flaky_tests", pa.list_(pa.string())),
        ("unknown_at_base", pa.list_(pa.string())),
        ("fallback_used", pa.bool_()),
        ("base_runs", pa.int64()),
        ("head_runs", pa.int64()),
        ("base_image", pa.string()),
        ("head_image", pa.string()),
        ("duration_s", pa.float64()),
        ("log_dir", pa.string()),
        ("error", pa.string()),
        ("test_scope", pa.list_(pa.string())),
        ("frontend_test_scope", pa.list_(pa.string())),
        ("cannot_run", pa.list_(pa.struct([("test", pa.string()), ("reason", pa.string())]))),
    ]
)


@dataclass
class ExtractionResult:
    number: int
    status: ExtractionStatus
    base_commit: str
    head_commit: str
    backend_fail_to_pass: list[str] = field(default_factory=list)
    backend_pass_to_pass: list[str] = field(default_factory=list)
    frontend_fail_to_pass: list[str] = field(default_factory=list)
    frontend_pass_to_pass: list[str] = field(default_factory=list)
    sides: list[str] = field(default_factory=list)
    flaky_tests: list[str] = field(default_factory=list)
    unknown_at_base: list[str] = field(default_factory=list)
    fallback_used: bool = False
    base_runs: int = 0
    head_runs: int = 0
    base_image: str = ""
    head_image: str = ""
    duration_s: float = 0.0
    log_dir: str = ""
    error: str | None = None
    # The backend test files the runs covered (the source's test scope); empty: the whole suite.
    test_scope: list[str] = field(default_factory=list)
    # The Playwright specs the head runs covered (`[frontend.test_scope]`); empty: every spec.
    frontend_test_scope: list[str] = field(default_factory=list)
    # Tests the test patch adds or changes that cannot run here, in neither list: skipped in every head run
    # (a spec that needs an API key) or failing there for want of the outside network. {test, reason}.
    cannot_run: list[dict] = field(default_factory=list)

    def to_row(self) -> dict:
        row = asdict(self)
        row["status"] = str(self.status)
        row["f2p_count"] = len(self.backend_fail_to_pass) + len(self.frontend_fail_to_pass)
        row["p2p_count"] = len(self.backend_pass_to_pass) + len(self.frontend_pass_to_pass)
        return row

    def set_labels(self, side: Side, labels: grading.Labels) -> None:
        setattr(self, f"{side}_fail_to_pass", labels.fail_to_pass)
        setattr(self, f"{side}_pass_to_pass", labels.pass_to_pass)
        self.flaky_tests += labels.flaky
        self.unknown_at_base += labels.unknown_at_base
        self.fallback_used |= labels.fallback_used

    def tests(self, kind: str) -> list[str]:
        """Both sides' FAIL_TO_PASS ("fail_to_pass") or PASS_TO_PASS ("pass_to_pass")."""
        return [*getattr(self, f"backend_{kind}"), *getattr(self, f"frontend_{kind}")]

    @classmethod
    def from_row(cls, row: dict) -> ExtractionResult:
        row = {k: v for k, v in row.items() if k not in ("f2p_count", "p2p_count")}
        for old in ("fail_to_pass", "pass_to_pass"):  # a row cached before the lists were named per side
            if old in row:
                row[f"backend_{old}"] = row.pop(old)
        row["status"] = ExtractionStatus(row["status"])
        for key in (
            "backend_fail_to_pass",
            "backend_pass_to_pass",
            "frontend_fail_to_pass",
            "frontend_pass_to_pass",
            "sides",
            "flaky_tests",
            "unknown_at_base",
            "test_scope",
            "frontend_test_scope",
            "cannot_run",
        ):
            row[key] = list(row.get(key) or [])
        return cls(**row)


def changed_tests(source: SourceRecord, repo: Path, base: str, head: str, test_paths: list[str]) -> set[str]:
    """Test ids (relative to the backend dir) that the PR's test files add or rewrite, found with `ast`
    (`changed_test_functions`)."""
    prefix = source.backend.prefix
    out: set[str] = set()
    for path in test_paths:
        if not (path.startswith(prefix) and path.endswith(".py")):
            continue
        after = gitops.read_file(repo, head, path)
        if after is None:
            continue
        before = gitops.read_file(repo, base, path)
        rel = path[len(prefix) :]
        out |= changed_test_functions(before.decode() if before else None, after.decode(), rel)
    return out


def extract(
    source: SourceRecord,
    repo: Path,
    number: int,
    base: str,
    head: str,
    log_dir: Path,
    *,
    head_runs: int = 3,
    base_runs: int = 2,
    run: Callable[[engine.RunRequest], engine.RunResult] = engine.run_tests,
    labels: str = "pbench",
    collection_errors: str = "continue",
) -> ExtractionResult:
    if head_runs < 3 or base_runs < 2:
        raise ValueError("flakiness needs at least 3 head runs and 2 base runs")
    start = time.monotonic()
    log_dir = Path(log_dir)
    result = ExtractionResult(number, ExtractionStatus.INFRA_ERROR, base, head, log_dir=str(log_dir))
    split = patches.split_patch(gitops.diff(repo, base, head), source)
    if not split.test_patch.strip():
        result.status, result.error = ExtractionStatus.NO_FAIL_TO_PASS, "the PR changes no test file"
        return _done(result, start, log_dir)
    if not split.patch.strip():
        result.status, result.error = ExtractionStatus.TEST_ONLY, "the PR changes only test files"
        return _done(result, start, log_dir)
    sides = [Side.BACKEND] if split.test_patch_backend.strip() else []
    if split.test_patch_frontend.strip() and source.frontend is not None:
        sides.append(Side.FRONTEND)
    result.sides = [str(s) for s in sides]
    nothing: list[str] = []  # why a side has nothing to run
    try:
        result.test_scope = list(test_scope.scope_files(source, repo, base, split))
    except test_scope.NothingToRun as exc:
        # The Playwright side may still have its specs (a PR whose pytest changes are all under ignored
        # paths, or a PR with Playwright specs only): without one, the PR has nothing to run.
        if Side.FRONTEND not in sides:
            result.status, result.error = ExtractionStatus.NO_FAIL_TO_PASS, str(exc)
            return _done(result, start, log_dir)
        if Side.BACKEND in sides:
            sides.remove(Side.BACKEND)
            nothing.append(f"backend: {exc}")
        result.sides = [str(s) for s in sides]
    if Side.FRONTEND in sides:
        try:
            result.frontend_test_scope = list(test_scope.frontend_scope_files(source, repo, base, split))
        except test_scope.NothingToRun as exc:
            sides.remove(Side.FRONTEND)  # the backend side may still have its tests
            nothing.append(f"frontend: {exc}")
            result.sides = [str(s) for s in sides]
            if not sides:
                result.status, result.error = ExtractionStatus.NO_FAIL_TO_PASS, "; ".join(nothing)
                return _done(result, start, log_dir)
    chains = {
        "base": (base_runs, (engine.PatchInput("test_patch", split.test_patch),)),
        "head": (
            head_runs,
            (engine.PatchInput("gold", split.patch), engine.PatchInput("test_patch", split.test_patch)),
        ),
    }
    state = _run_sides(source, repo, number, base, log_dir, sides, chains, run, result)
    if state is None:
        return _done(result, start, log_dir)
    for side in sides:
        _label_side(source, repo, base, head, split, side, state[side], result, labels, collection_errors)
    has_f2p = result.backend_fail_to_pass or result.frontend_fail_to_pass
    result.status = ExtractionStatus.OK if has_f2p else ExtractionStatus.NO_FAIL_TO_PASS
    if not has_f2p and result.cannot_run:
        kinds = sorted({c["reason"].split(":", 1)[0] for c in result.cannot_run})
        said = (
            f"{len(result.cannot_run)} test(s) the test patch adds or changes cannot run here "
            f"({', '.join(kinds)}; e.g. {result.cannot_run[0]['reason'][:100]})"
        )
        result.error = f"{result.error}; {said}" if result.error else f"no FAIL_TO_PASS: {said}"
    return _done(result, start, log_dir)


def _run_sides(source, repo, number, base, log_dir, sides, chains, run, result) -> dict | None:
    """Every side's runs, head-1 and base-1 of each side first: after them, no FAIL_TO_PASS candidate in any side
    means none at all (more runs only remove tests from FAIL_TO_PASS: a test whose outcome changes is flaky,
    the fallback only narrows), and the other runs are skipped. {side: _SideState}, or None when a run makes
    extraction impossible (its reason set on `result`)."""
    state = {side: _SideState() for side in sides}
    schedule = _schedule(chains)
    for phase, steps in (("first", schedule[:2]), ("rest", schedule[2:])):
        for side in sides:
            if not _side_runs(
                source, repo, number, base, log_dir, side, chains, run, result, steps, state[side]
            ):
                return None
        if phase == "first" and not any(state[side].has_candidate() for side in sides):
            stopped = [f"{side}: no test passed at head-1" for side in sides if state[side].stopped]
            result.error = (
                "no test passes at head and fails at base after one run of each: no FAIL_TO_PASS "
                "(more runs can only remove tests), the other runs skipped"
                + (f" ({'; '.join(stopped)})" if stopped else "")
            )
            break
    return state


def _label_side(
    source,
    repo,
    base,
    head,
    split,
    side,
    state: _SideState,
    result: ExtractionResult,
    rule: str = "pbench",
    collection_errors: str = "continue",
) -> None:
    """One side's FAIL_TO_PASS / PASS_TO_PASS from its runs (`grading.extract_labels` under `rule`); a side
    where nothing passed at head has no base run and labels nothing. Under a published rule the backend's
    fallback candidates are what that harness read in the test patch (`def_line_tests`)."""
    outcomes = state.outcomes
    if side == Side.BACKEND:
        changed = changed_tests(source, repo, base, head, patches.changed_paths(split.test_patch_backend))
    else:
        changed = _changed_spec_tests(source, repo, base, head, split.test_patch_frontend, outcomes["head"])
    # Before the labels: a side whose tests were all skipped at head has no base run, and is said too.
    result.cannot_run += grading.cannot_run_here(
        outcomes["head"], state.head_messages, changed, state.head_service_network
    )
    if not outcomes["base"]:
        return
    if side == Side.BACKEND and rule == "published-v0.1":
        prefix = "" if source.backend.dir in ("", ".") else source.backend.dir.rstrip("/") + "/"
        changed = def_line_tests(split.test_patch_backend, prefix)
    labels = grading.extract_labels(
        outcomes["base"],
        outcomes["head"],
        base_collection_errors=state.base_errors,
        changed_tests=changed,
        rule=rule,
        collection_errors=collection_errors,
    )
    result.set_labels(side, labels)


def _schedule(chains) -> list[tuple[str, int]]:
    """head-1, base-1, then the other head runs, then the other base runs: head first (if the reference
    solution does not run cleanly there is nothing to extract), and one run of each early, so that a PR
    without any FAIL_TO_PASS candidate stops after two runs per side (`extract` runs the first two of every
    side before the others)."""
    heads, bases = chains["head"][0], chains["base"][0]
    return [("head", 1), ("base", 1), *(("head", i) for i in range(2, heads + 1))] + [
        ("base", i) for i in range(2, bases + 1)
    ]


def _no_candidate(head: dict, base: dict) -> bool:
    """No test passes at head and does not pass at base (absent included). More runs only remove tests from
    FAIL_TO_PASS (a test whose outcome changes between runs is flaky, the fallback only narrows), so this
    after one run of each side means FAIL_TO_PASS is empty whatever the other runs say."""
    return not any(
        str(outcome) in PASSING_OUTCOMES and str(base.get(test_id, "missing")) not in PASSING_OUTCOMES
        for test_id, outcome in head.items()
    )


@dataclass
class _SideState:
    """One side's runs so far: outcomes per run ({when: [outcomes]}), base collection errors, and whether it
    stopped because nothing passed at head (no base run then: nothing it could label)."""

    outcomes: dict[str, list[dict]] = field(default_factory=lambda: {"base": [], "head": []})
    base_errors: set[str] = field(default_factory=set)
    stopped: bool = False
    head_messages: dict[str, str] = field(default_factory=dict)  # a test's message in its last head run
    # Per head run: a line of its live backend's log saying the outside network was wanted ("" for none).
    head_service_network: list[str] = field(default_factory=list)

    def has_candidate(self) -> bool:
        """A FAIL_TO_PASS candidate after its first head and base runs (`_no_candidate`)."""
        heads, bases = self.outcomes["head"], self.outcomes["base"]
        return bool(heads and bases) and not _no_candidate(heads[0], bases[0])


def _side_runs(
    source, repo, number, base, log_dir, side, chains, run, result, steps, state: _SideState
) -> bool:
    """The runs `steps` of one side (a part of `_schedule`), added to `state`. False when a run makes extraction
    impossible (its reason set on `result`)."""
    outcomes = state.outcomes
    for when, i in steps:
        if state.stopped:
            break
        chain = chains[when][1]
        name = f"{when}-{i}" if side == Side.BACKEND else f"{side}-{when}-{i}"
        # A Playwright side's later runs select the tests that passed in every head run so far, the shape
        # evaluation runs (`_passing_everywhere`); head-1 runs its whole scope.
        shaped = side == Side.FRONTEND and (when == "base" or i > 1)
        if side == Side.BACKEND:
            selection = tuple(result.test_scope)
        elif shaped:
            selection = _passing_everywhere(outcomes["head"])
            if not selection:
                state.stopped = True  # nothing passed in every head run: nothing left to label
                break
        else:
            selection = tuple(result.frontend_test_scope)
        request = engine.RunRequest(
            source,
            repo,
            base,
            log_dir / name,
            chain,
            selection=selection,
            side=side,
            label=f"#{number} {name}",
        )
        key = resume.run_key(log_dir, request)
        res = resume.taken_over(key, request) or run(request)
        setattr(result, f"{when}_image", res.image)
        setattr(result, f"{when}_runs", i)
        stop = _why_not(res, when, name)
        if stop is not None:
            result.status, result.error = stop
            return False
        resume.mark(key, request)
        if when == "head" and shaped:
            # The tests it did not select failed (or were flaky) in an earlier head run: they keep that
            # outcome, and the network evidence for them is head-1's live backend (they ran there only).
            earlier = outcomes["head"][-1]
            outcomes["head"].append({**{t: o for t, o in earlier.items() if t not in selection}, **res.tests})
            state.head_service_network.append(state.head_service_network[0])
        else:
            outcomes[when].append(res.tests)
            if when == "head":
                state.head_service_network.append(_services_network(res.log_dir))
        if when == "head":
            state.head_messages.update(res.messages)
        if when == "base":
            state.base_errors |= set(res.collection_errors)
            if not res.suite_ran:
                # Killed or crashed before any report (e.g. the bug leaks memory until the container's limit):
                # no test has a base outcome. As for a file that fails to collect, the tests the test patch
                # adds or rewrites that pass at head are FAIL_TO_PASS and the rest are
                # unknown at base, never FAIL_TO_PASS by default.
                state.base_errors |= {grading.file_of(t) for run_ in outcomes["head"] for t in run_}
    return True


def _services_network(log_dir: str) -> str:
    """`grading.network_line` of the log of the live backend a run's Playwright side drives
    (`backend-serve/serve.log`), "" when it says nothing of the outside network or the run has none."""
    path = Path(log_dir) / "backend-serve" / "serve.log"
    return grading.network_line(path.read_text(errors="replace")) if log_dir and path.is_file() else ""


def _passing_everywhere(head_runs: list[dict]) -> tuple[str, ...]:
    """The tests that passed in every head run so far, sorted: all a Playwright side's runs after head-1 need
    to run (the engine selects their locations). A test that failed in a head run is in neither list whatever
    its base outcome, and a failing test costs its whole timeout (30 s in the template's config). Evaluation
    runs the same kind of selection (the graded tests), so head-2 and head-3 run in its shape: a test that
    passes only in the whole scope (it needs what an earlier spec left behind, or a warm app: langflow #7148's
    publish-flow spec, first of the selection, read an empty flow id at base and in the self-test's gold run)
    changes between head runs and is flaky, never FAIL_TO_PASS."""
    passing = set(head_runs[0]) if head_runs else set()
    for run in head_runs:
        passing &= {t for t, outcome in run.items() if str(outcome) in PASSING_OUTCOMES}
    return tuple(sorted(passing))


def _why_not(res: engine.RunResult, when: str, name: str) -> tuple[ExtractionStatus, str] | None:
    """Why a run ends the extraction: it did not complete, the guards tripped, or the reference solution's run
    did not collect cleanly."""
    if res.status != RunStatus.COMPLETED:
        status = (
            ExtractionStatus(str(res.status))
            if str(res.status) in _BY_VALUE
            else ExtractionStatus.INFRA_ERROR
        )
        return status, f"{name}: {res.status}: {res.error or ''} (log: {res.log_dir})".strip()
    if res.tampering:
        why = "; ".join(res.tampering[:3])
        return (
            ExtractionStatus.TAMPERING_SEEN,
            f"{name}: the judge's guards tripped: {why} (log: {res.log_dir})",
        )
    if when == "head" and (res.collection_errors or not res.suite_ran):
        return ExtractionStatus.TEST_COLLECTION_FAILED, (
            f"{name}: the suite did not run cleanly with the reference patch "
            f"(collection errors: {res.collection_errors}, exit {res.exit_code})"
        )
    return None


def _changed_spec_tests(
    source: SourceRecord, repo: Path, base: str, head: str, test_patch_frontend: str, head_runs: list[dict]
) -> set[str]:
    """Playwright tests (ids of the head runs) that the test patch adds or rewrites: every test of a spec file
    it creates, and in a file it changes the tests whose text differs (`changed_spec_tests`)."""
    from tasks_lib.formats import playwright_report

    prefix = source.frontend.prefix
    by_file: dict[str, list[tuple[str, int]]] = {}
    for test_id in {t for run in head_runs for t in run}:
        where = playwright_report.location_of(test_id)
        if where is not None:
            by_file.setdefault(where[0], []).append((test_id, where[1]))
    out: set[str] = set()
    for fd in patches.file_diffs(test_patch_frontend):
        if not (fd.new_path and fd.new_path.startswith(prefix)):
            continue
        tests = by_file.get(fd.new_path[len(prefix) :])
        if not tests:
            continue
        after = gitops.read_file(repo, head, fd.new_path)
        before = gitops.read_file(repo, base, fd.old_path) if fd.old_path else None
        if after is None:
            continue
        text = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        out |= changed_spec_tests(text(before) if before is not None else None, text(after), tests)
    return out


def run_outcomes(log_dir: Path, side: Side = Side.BACKEND) -> dict[str, list[dict[str, str]]]:
    """Per-test outcomes of each run of one side, as the runs recorded them (`<run>/run.json` under an
    extraction's log folder): {"head": [run 1, run 2, ...], "base": [...]}, the runs in their order. What
    `extract_labels` was given, for a reader who wants to see why a test was called flaky."""
    prefix = "" if side == Side.BACKEND else f"{side}-"
    out: dict[str, list[dict[str, str]]] = {"head": [], "base": []}
    for when in out:
        runs = sorted(
            log_dir.glob(f"{prefix}{when}-*/run.json"), key=lambda p: int(p.parent.name.rsplit("-", 1)[1])
        )
        out[when] = [json.loads(p.read_text()).get("tests", {}) for p in runs]
    return out


def changed_between_runs(log_dir: Path, test_ids, side: Side = Side.BACKEND) -> set[str]:
    """Those of `test_ids` whose recorded outcome (absent counts as one) changed between two runs of the same
    side (`run_outcomes`): the tests the flaky detector must report."""
    runs = run_outcomes(Path(log_dir), side)
    return {
        t for t in test_ids if any(len({r.get(t, grading.MISSING) for r in rs}) > 1 for rs in runs.values())
    }


def _done(result: ExtractionResult, start: float, log_dir: Path) -> ExtractionResult:
    result.duration_s = round(time.monotonic() - start, 3)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "extraction.json").write_text(json.dumps(result.to_row(), indent=2))
    return result
