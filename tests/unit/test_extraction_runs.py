"""The order and the number of extraction runs: head-1 and base-1 of each side first; a PR without any
FAIL_TO_PASS candidate in any side after them stops there; otherwise every run happens (flakiness needs them all), a Playwright side's
base runs on the tests that passed in every head run."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from tasks_lib.core.constants import ExtractionStatus, Outcome, RunStatus
from tasks_lib.curation import extraction
from tasks_lib.engine import RunResult, grading
from tasks_lib.formats import playwright_report
from tasks_lib.sources.record import TestScope, load_source

P, F = Outcome.PASSED, Outcome.FAILED


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _two_commits(
    tmp_path: Path, base_files: dict[str, str], head_files: dict[str, str]
) -> tuple[Path, str, str]:
    """A repository with a base commit of `base_files`, then a head commit rewriting `head_files`
    (paths relative to the repository): (git dir, base sha, head sha)."""
    work = tmp_path / "work"
    shas = []
    for files in (base_files, head_files):
        for rel, text in files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_text(text)
        if not shas:
            _git(tmp_path, "init", "-q", str(work))
        _git(work, "add", "-A")
        _git(work, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", f"commit {len(shas)}")
        shas.append(_git(work, "rev-parse", "HEAD").strip())
    return work / ".git", shas[0], shas[1]


BACKEND_BASE = {
    "backend/app/items.py": "def n():\n    return 1\n",
    "backend/tests/test_items.py": "def test_one():\n    pass\n",
}
BACKEND_HEAD = {
    "backend/app/items.py": "def n():\n    return 2\n",
    "backend/tests/test_items.py": "def test_one():\n    pass\n\ndef test_two():\n    pass\n",
}


@pytest.fixture
def pr(tmp_path):
    """A demo-shaped repository: base, then head changing backend code and a backend test file."""
    return _two_commits(tmp_path, BACKEND_BASE, BACKEND_HEAD)


def _runner(outcomes: dict[str, dict], base_ran: bool = True):
    seen: list[str] = []

    def run(req):
        name = Path(req.log_dir).name
        seen.append(name)
        ran = base_ran or name.startswith("head")
        return RunResult(RunStatus.COMPLETED, tests=outcomes[name.split("-")[0]], suite_ran=ran, image="img")

    return run, seen


def test_no_candidate_after_one_run_of_each_stops_the_pr(pr, tmp_path):
    repo, base, head = pr
    same = {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": P}
    run, seen = _runner({"head": same, "base": same})
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert seen == ["head-1", "base-1"]
    assert result.status == ExtractionStatus.NO_FAIL_TO_PASS and (result.head_runs, result.base_runs) == (
        1,
        1,
    )
    assert "other runs skipped" in result.error


def test_a_candidate_gets_every_run_head_first(pr, tmp_path):
    repo, base, head = pr
    run, seen = _runner(
        {
            "head": {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": P},
            "base": {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": F},
        }
    )
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert seen == ["head-1", "base-1", "head-2", "head-3", "base-2"]
    assert result.status == ExtractionStatus.OK
    assert result.backend_fail_to_pass == ["tests/test_items.py::test_two"]
    assert (result.head_runs, result.base_runs) == (3, 2) and not result.error


def test_a_test_absent_at_base_is_a_candidate(pr, tmp_path):
    """A test the test patch adds is absent at base when its file fails to collect: not a reason to stop."""
    repo, base, head = pr
    run, seen = _runner(
        {"head": {"tests/test_items.py::test_two": P}, "base": {"tests/test_items.py::test_one": P}}
    )
    extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert len(seen) == 5


def test_a_base_run_killed_before_any_report_knows_no_base_outcome(pr, tmp_path):
    """Rule: a base run killed before it reports (exit -9: the PR's memory leak reached the container's
    limit) gives no test a base outcome: only the tests the test patch adds are FAIL_TO_PASS, the others are
    unknown at base (before: every test passing at head became FAIL_TO_PASS, mcp-context-forge #4029: 1,068)."""
    repo, base, head = pr
    head_tests = {"tests/test_items.py::test_one": P, "tests/test_items.py::test_two": P}
    run, seen = _runner({"head": head_tests, "base": {}}, base_ran=False)
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.status == ExtractionStatus.OK and len(seen) == 5
    assert result.backend_fail_to_pass == ["tests/test_items.py::test_two"] and result.fallback_used
    assert result.unknown_at_base == ["tests/test_items.py::test_one"] and result.backend_pass_to_pass == []


def test_tests_that_cannot_run_here_are_in_neither_list_and_said(pr, tmp_path):
    """Rule: a test the test patch adds or changes that is skipped in every head run (a spec without its API
    key) or fails there for want of the outside network is in neither list, recorded with its reason in
    `cannot_run`; a PR left with no FAIL_TO_PASS by them says so. An unchanged test skipped or failing is not
    counted, nor a failure that is not about the network."""
    repo, base, head = pr
    two, one = "tests/test_items.py::test_two", "tests/test_items.py::test_one"
    head_tests = {one: Outcome.SKIPPED, two: Outcome.SKIPPED}

    def run(req):
        name = Path(req.log_dir).name
        tests = head_tests if name.startswith("head") else {one: P, two: F}
        return RunResult(RunStatus.COMPLETED, tests=tests, suite_ran=True, image="img",
                         messages={one: "skip: nope", two: "skip: OPENAI_API_KEY required to run this test"})  # fmt: skip

    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.cannot_run == [
        {"test": two, "reason": "skipped: skip: OPENAI_API_KEY required to run this test"}
    ]
    assert result.status == ExtractionStatus.NO_FAIL_TO_PASS and result.backend_fail_to_pass == []
    assert "1 test(s) the test patch adds or changes cannot run here (skipped;" in result.error
    back = extraction.ExtractionResult.from_row(result.to_row())
    assert back.cannot_run == result.cannot_run
    offline = "httpx.ConnectError: [Errno -3] Temporary failure in name resolution"
    assert grading.cannot_run_here([{two: F}] * 3, {two: offline}, {two}) == [
        {"test": two, "reason": f"network: {offline}"}
    ]
    assert grading.cannot_run_here([{two: F}, {two: Outcome.SKIPPED}], {two: "skip: x"}, {two}) == []
    assert grading.cannot_run_here([{one: F}] * 3, {one: offline}, {two}) == []  # not a changed test


def test_a_changed_test_failing_with_the_reference_solution_is_said_with_its_reason():
    """Rule: a test the test patch adds or changes that fails in every head run is in neither list and said:
    `network` when its message, or the live backend behind every head run (langflow #11048: a spec whose Loop
    fetched Wikipedia timed out waiting for "built successfully"), says the outside network was wanted;
    `fails_at_head` otherwise, never silently dropped. A test failing in some head runs only is flaky, not
    counted here."""
    two = "tests/core/loop.spec.ts:9:5 › loop"
    timeout = "TimeoutError: page.waitForSelector: Timeout 30000ms exceeded."
    dns = "Cannot connect to host en.example.org:443 ssl:default [Temporary failure in name resolution]"
    assert grading.cannot_run_here([{two: F}] * 2, {two: timeout}, {two}, [dns, dns]) == [
        {"test": two, "reason": f"network: the live backend: {dns} (the test: {timeout})"}
    ]
    assert grading.cannot_run_here([{two: F}] * 2, {two: timeout}, {two}, [dns, ""]) == [
        {"test": two, "reason": f"fails_at_head: {timeout}"}
    ]
    assert grading.cannot_run_here([{two: F}] * 3, {two: "AssertionError: 1 != 2"}, {two}) == [
        {"test": two, "reason": "fails_at_head: AssertionError: 1 != 2"}
    ]
    assert grading.cannot_run_here([{two: Outcome.ERROR}], {}, {two}) == [
        {"test": two, "reason": "fails_at_head: no message"}
    ]
    assert grading.cannot_run_here([{two: F}, {two: P}], {two: timeout}, {two}, [dns, dns]) == []
    late = (  # langflow #6302: requests' message names the network after 200 characters
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='en.example.org', port=443): Max retries "
        'exceeded with url: /wiki/X (Caused by NameResolutionError("<urllib3.connection.HTTPSConnection object>: '
        "Failed to resolve 'en.example.org' ([Errno -3] Temporary failure in name resolution)\"))"
    )
    assert grading.cannot_run_here([{two: F}], {two: late}, {two}) == [
        {"test": two, "reason": f"network: {late[:200]}"}
    ]
    assert grading.network_line(f"INFO: GET / 200\n  Unable to load: {dns}\nmore") == f"Unable to load: {dns}"
    assert grading.network_line("INFO: all fine\n") == ""


def test_extraction_reads_the_live_services_logs_of_each_head_run(pr, tmp_path):
    """The services' logs a run leaves (`backend-serve/serve.log` in its folder) tell extraction that a changed
    test failing at head wanted the outside network; a run without services says nothing."""
    repo, base, head = pr
    two, one = "tests/test_items.py::test_two", "tests/test_items.py::test_one"
    dns = (
        "aiohttp.ClientConnectorDNSError: Cannot connect to host example.org:443 [Name or service not known]"
    )

    def run(req):
        folder = Path(req.log_dir)
        if folder.name.startswith("head"):
            (folder / "backend-serve").mkdir(parents=True)
            (folder / "backend-serve" / "serve.log").write_text(f"INFO: started\nERROR {dns}\n")
        tests = {one: P, two: F} if folder.name.startswith("head") else {one: F, two: F}
        return RunResult(RunStatus.COMPLETED, tests=tests, suite_ran=True, image="img", log_dir=str(folder),
                         messages={two: "AssertionError: no rows"})  # fmt: skip

    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.cannot_run == [
        {"test": two, "reason": f"network: the live backend: ERROR {dns} (the test: AssertionError: no rows)"}
    ]


def test_a_test_the_test_patch_rewrites_is_fail_to_pass_when_its_file_has_no_base_outcome(tmp_path):
    """Rule (extraction 3): in a file without base outcomes, a test the test patch rewrites (its code differs)
    is FAIL_TO_PASS like an added one; an untouched test of the same file stays unknown at base
    (fastapi-template #1429: its Playwright tests rewritten to use the PR's new private API)."""
    before = "def test_same():\n    pass\n\ndef test_rewritten():\n    assert True\n"
    after = "from app.items import n\n\ndef test_same():\n    pass\n\ndef test_rewritten():\n    assert n() == 2\n"
    repo, base, head = _two_commits(
        tmp_path,
        {**BACKEND_BASE, "backend/tests/test_items.py": before},
        {**BACKEND_HEAD, "backend/tests/test_items.py": after},
    )
    same, rewritten = "tests/test_items.py::test_same", "tests/test_items.py::test_rewritten"
    run, _ = _runner({"head": {same: P, rewritten: P}, "base": {}}, base_ran=False)
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.status == ExtractionStatus.OK and result.fallback_used
    assert result.backend_fail_to_pass == [rewritten] and result.unknown_at_base == [same]


@pytest.fixture
def frontend_pr(tmp_path):
    """Base, then head changing frontend code and a Playwright spec file (the demo source's frontend dir)."""
    spec = "import { test } from '@playwright/test';\n\ntest('one', async () => {});\n"
    more = "\ntest('two', async () => {});\n\ntest('three', async () => {});\n"
    return _two_commits(
        tmp_path,
        {"frontend/src/app.js": "export const n = 1;\n", "frontend/tests/items.spec.js": spec},
        {"frontend/src/app.js": "export const n = 2;\n", "frontend/tests/items.spec.js": spec + more},
    )


ONE, TWO, THREE = (
    "tests/items.spec.js:3:1 › one",
    "tests/items.spec.js:5:1 › two",
    "tests/items.spec.js:7:1 › three",
)


def _recording_runner(by_run: dict[str, dict]):
    """Outcomes per run name (frontend-head-1, ...); records each run's selection."""
    selections: dict[str, tuple] = {}

    def run(req):
        name = Path(req.log_dir).name
        selections[name] = tuple(req.selection)
        playwright_report.selection_args(
            req.selection
        )  # what the engine does with it: test ids, not locations
        return RunResult(RunStatus.COMPLETED, tests=by_run[name], suite_ran=True, image="img")

    return run, selections


def test_a_playwright_side_whose_new_tests_all_skip_at_head_says_so_without_a_base_run(frontend_pr, tmp_path):
    """Rule: key-gated specs skip in every head run; with nothing passing at head the side has no base run,
    and its skipped new tests are still in `cannot_run` with the skip's reason."""
    repo, base, head = frontend_pr
    skipped = {ONE: Outcome.SKIPPED, TWO: Outcome.SKIPPED, THREE: Outcome.SKIPPED}

    def run(req):
        why = {t: "skip: OPENAI_API_KEY required to run this test" for t in skipped}
        return RunResult(RunStatus.COMPLETED, tests=skipped, suite_ran=True, image="img", messages=why)

    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.base_runs == 0 and result.status == ExtractionStatus.NO_FAIL_TO_PASS
    assert {TWO, THREE} <= {c["test"] for c in result.cannot_run}
    assert {c["reason"] for c in result.cannot_run} == {
        "skipped: skip: OPENAI_API_KEY required to run this test"
    }


def test_a_playwright_base_run_runs_only_the_tests_that_passed_in_every_head_run(frontend_pr, tmp_path):
    """Rule: head-1 is whole; every later run of a Playwright side (head and base) selects the locations of the
    tests that passed in every head run so far (a test failing at head is in neither list, and fails at its
    whole timeout). A test that changes at head is still reported flaky; one that failed at head-1 and was not
    run again is not."""
    repo, base, head = frontend_pr
    run, selections = _recording_runner(
        {
            "frontend-head-1": {ONE: P, TWO: P, THREE: F},
            "frontend-base-1": {ONE: P, TWO: F},
            "frontend-head-2": {ONE: P, TWO: P},
            "frontend-head-3": {ONE: F, TWO: P},
            "frontend-base-2": {TWO: F},
        }
    )
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert list(selections) == [
        "frontend-head-1",
        "frontend-base-1",
        "frontend-head-2",
        "frontend-head-3",
        "frontend-base-2",
    ]
    assert selections["frontend-head-1"] == ()
    assert selections["frontend-base-1"] == selections["frontend-head-2"] == (ONE, TWO)
    assert selections["frontend-head-3"] == (ONE, TWO)
    assert selections["frontend-base-2"] == (TWO,)
    assert result.status == ExtractionStatus.OK
    assert result.frontend_fail_to_pass == [TWO] and result.frontend_pass_to_pass == []
    assert result.flaky_tests == [ONE]


def test_a_playwright_test_that_passes_only_in_the_whole_scope_is_flaky_never_fail_to_pass(
    frontend_pr, tmp_path
):
    """langflow #7148: a spec that passed third in the whole scope read an empty flow id when it ran first, as
    the selection of the base runs and of evaluation runs it: it failed at base for that, not for the missing
    feature, and the reference solution failed it in the self-test. Head-2 and head-3 run in that shape."""
    repo, base, head = frontend_pr
    run, selections = _recording_runner(
        {
            "frontend-head-1": {ONE: P, TWO: P, THREE: P},
            "frontend-base-1": {ONE: F, TWO: P, THREE: F},
            "frontend-head-2": {ONE: F, TWO: P, THREE: P},  # ONE needs what the whole scope ran before it
            "frontend-head-3": {TWO: P, THREE: P},
            "frontend-base-2": {TWO: P, THREE: F},
        }
    )
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert selections["frontend-head-3"] == selections["frontend-base-2"] == (TWO, THREE)
    assert result.frontend_fail_to_pass == [THREE] and result.frontend_pass_to_pass == [TWO]
    assert result.flaky_tests == [ONE]


def test_a_changed_playwright_test_failing_at_head_1_is_said_from_that_run(frontend_pr, tmp_path):
    """A test that failed at head-1 is not run again (later runs select what passed): `cannot_run` reads its
    message and head-1's live backend log, for every head run."""
    repo, base, head = frontend_pr
    serve = tmp_path / "logs" / "frontend-head-1" / "backend-serve"
    serve.mkdir(parents=True)
    (serve / "serve.log").write_text("httpx.ConnectError: [Errno -3] Temporary failure in name resolution\n")
    by_run = {
        "frontend-head-1": {ONE: P, TWO: P, THREE: F},
        "frontend-base-1": {ONE: P, TWO: F},
        "frontend-head-2": {ONE: P, TWO: P},
        "frontend-head-3": {ONE: P, TWO: P},
        "frontend-base-2": {ONE: P, TWO: F},
    }

    def run(req):
        name = Path(req.log_dir).name
        why = {THREE: "Test timeout of 30000ms exceeded."} if name == "frontend-head-1" else {}
        res = RunResult(RunStatus.COMPLETED, tests=by_run[name], suite_ran=True, image="img", messages=why)
        res.log_dir = str(req.log_dir)
        return res

    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert result.frontend_fail_to_pass == [TWO] and result.frontend_pass_to_pass == [ONE]
    assert result.flaky_tests == []
    assert [c["test"] for c in result.cannot_run] == [THREE]
    assert result.cannot_run[0]["reason"].startswith("network: the live backend: ")


def test_a_playwright_side_with_nothing_passing_at_head_skips_its_base_runs(frontend_pr, tmp_path):
    repo, base, head = frontend_pr
    run, selections = _recording_runner({"frontend-head-1": {ONE: F, TWO: F, THREE: F}})
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert list(selections) == ["frontend-head-1"]
    assert result.status == ExtractionStatus.NO_FAIL_TO_PASS and (result.head_runs, result.base_runs) == (
        1,
        0,
    )
    assert "other runs skipped" in result.error and "frontend: no test passed at head-1" in result.error


@pytest.fixture
def fullstack_pr(tmp_path):
    """Base, then head changing backend and frontend code, a backend test file and a Playwright spec file."""
    return _two_commits(
        tmp_path,
        {
            **BACKEND_BASE,
            "frontend/src/app.js": "export const n = 1;\n",
            "frontend/tests/items.spec.js": "test('one', async () => {});\n",
        },
        {
            **BACKEND_HEAD,
            "frontend/src/app.js": "export const n = 2;\n",
            "frontend/tests/items.spec.js": "test('one', async () => {});\ntest('two', async () => {});\n",
        },
    )


B_ONE, B_TWO = "tests/test_items.py::test_one", "tests/test_items.py::test_two"
F_ONE, F_TWO = "tests/items.spec.js:1:1 › one", "tests/items.spec.js:2:1 › two"


def _fullstack_runner(backend: dict[str, dict], frontend: dict[str, dict]):
    """Outcomes by side and by head/base; records the run names in order."""
    seen: list[str] = []

    def run(req):
        name = Path(req.log_dir).name
        seen.append(name)
        side, when = (
            (frontend, name.split("-")[1]) if name.startswith("frontend") else (backend, name.split("-")[0])
        )
        return RunResult(RunStatus.COMPLETED, tests=side[when], suite_ran=True, image="img")

    return run, seen


def test_a_side_with_nothing_passing_at_head_does_not_stop_the_other(fullstack_pr, tmp_path):
    """With two sides, a Playwright side where nothing passes at head stops after head-1 and labels nothing;
    the backend side still makes the instance, with no error on it."""
    repo, base, head = fullstack_pr
    run, seen = _fullstack_runner(
        {"head": {B_ONE: P, B_TWO: P}, "base": {B_ONE: P, B_TWO: F}}, {"head": {F_ONE: F, F_TWO: F}}
    )
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert [n for n in seen if n.startswith("frontend")] == ["frontend-head-1"]
    assert seen[:3] == ["head-1", "base-1", "frontend-head-1"]  # every side's first runs before the others
    assert result.status == ExtractionStatus.OK and result.error is None
    assert result.backend_fail_to_pass == [B_TWO] and result.backend_pass_to_pass == [B_ONE]
    assert result.frontend_fail_to_pass == [] and result.frontend_pass_to_pass == []


def test_two_sides_without_a_candidate_stop_after_one_run_of_each(fullstack_pr, tmp_path):
    """Rule: no test passing at head and not at base in any side after head-1 and base-1 of each: no
    FAIL_TO_PASS whatever the other runs say, so a two-side PR stops after four runs (before: all ten)."""
    repo, base, head = fullstack_pr
    backend = {B_ONE: P, B_TWO: P}
    frontend = {F_ONE: P, F_TWO: P}
    run, seen = _fullstack_runner({"head": backend, "base": backend}, {"head": frontend, "base": frontend})
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert seen == ["head-1", "base-1", "frontend-head-1", "frontend-base-1"]
    assert result.status == ExtractionStatus.NO_FAIL_TO_PASS and "other runs skipped" in result.error
    assert result.backend_pass_to_pass == [B_ONE, B_TWO] and result.frontend_pass_to_pass == [F_ONE, F_TWO]


def test_one_side_with_a_candidate_gets_every_run_of_both(fullstack_pr, tmp_path):
    """A candidate in one side: every run of both sides (the other side's PASS_TO_PASS needs them all)."""
    repo, base, head = fullstack_pr
    frontend = {F_ONE: P, F_TWO: P}
    run, seen = _fullstack_runner(
        {"head": {B_ONE: P, B_TWO: P}, "base": {B_ONE: P, B_TWO: F}}, {"head": frontend, "base": frontend}
    )
    result = extraction.extract(load_source("demo"), repo, 7, base, head, tmp_path / "logs", run=run)
    assert len(seen) == 10 and result.status == ExtractionStatus.OK
    assert result.frontend_pass_to_pass == [F_ONE, F_TWO] and result.backend_fail_to_pass == [B_TWO]


def _backend(source, **changes):
    """The source with its backend record changed (a `touched` scope: langflow's, mcp-context-forge's)."""
    return dataclasses.replace(source, backend=dataclasses.replace(source.backend, **changes))


def test_a_playwright_side_runs_when_the_backend_scope_holds_nothing(frontend_pr, fullstack_pr, tmp_path):
    """Rule: a `touched` backend scope with nothing to run (no pytest file changed, or every one under a path
    the test command ignores) drops the backend side only: the Playwright side still runs and labels (before,
    the PR ended no_fail_to_pass there: langflow #7110, and every PR with Playwright specs only). Without a
    Playwright side the PR ends as before."""
    source = _backend(load_source("demo"), scope=TestScope("touched", 2))
    repo, base, head = frontend_pr
    run, selections = _recording_runner(
        {
            "frontend-head-1": {ONE: P, TWO: P},
            "frontend-base-1": {ONE: P, TWO: F},
            "frontend-head-2": {ONE: P, TWO: P},
            "frontend-head-3": {ONE: P, TWO: P},
            "frontend-base-2": {ONE: P, TWO: F},
        }
    )
    result = extraction.extract(source, repo, 7, base, head, tmp_path / "a", run=run)
    assert result.status == ExtractionStatus.OK and result.sides == ["frontend"]
    assert result.frontend_fail_to_pass == [TWO] and result.frontend_pass_to_pass == [ONE]
    assert not any(name.startswith(("head", "base")) for name in selections)  # no backend run
    # A fullstack PR whose pytest file is under an ignored path: its backend side is dropped, not the PR.
    repo, base, head = fullstack_pr
    ignoring = _backend(source, test_command="python -m pytest --ignore=tests")
    run, seen = _fullstack_runner({}, {"head": {F_ONE: P, F_TWO: P}, "base": {F_ONE: P, F_TWO: F}})
    result = extraction.extract(ignoring, repo, 8, base, head, tmp_path / "b", run=run)
    assert result.status == ExtractionStatus.OK and result.sides == ["frontend"]
    assert result.frontend_fail_to_pass == [F_TWO] and not result.backend_fail_to_pass
    assert seen and all(name.startswith("frontend") for name in seen)
    # Without a Playwright side: no run, the scope's reason.
    backend_only = dataclasses.replace(ignoring, frontend=None)
    result = extraction.extract(backend_only, repo, 9, base, head, tmp_path / "c", run=run)
    assert (
        result.status == ExtractionStatus.NO_FAIL_TO_PASS and "changes no test the suite runs" in result.error
    )
