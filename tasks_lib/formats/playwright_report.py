"""Per-test outcomes from Playwright's JSON reporter, as the same record `tasks_lib.formats.junit` gives for pytest.

The harness runs, from the frontend directory of the checkout (containers/frontend/pbench-playwright.sh)::

    npx --no-install playwright test -c /pbench/in/playwright.pbench.config.mjs [file:line ...]

The injected config keeps the repository's own config and adds a JSON reporter writing
/pbench/out/playwright.json; `parse_playwright_file` turns that file into a `PlaywrightReport`, a
`tasks_lib.formats.junit.JUnitReport` with a few Playwright-only fields.

Test ids are PrototypeBench's: ``tests/items.spec.ts:42:3 › Items › archive button`` — the spec file
relative to the FRONTEND directory, the line and column of the `test(...)` call (1-based, as Playwright
prints them; for `test.skip(...)`/`test.fixme(...)` the column is that of `skip`/`fixme`), then the titles
of the enclosing `describe` blocks and the test's own title, joined by " › ". Anonymous describes
(`test.describe(() => ...)`) add no title. The project name is NOT part of the id.

How Playwright 1.65 writes the report (see its `reporters/json.ts`):

* `config.rootDir` is the top-level testDir (absolute); every suite's and spec's `file` is relative to it.
  The injected config records the frontend dir in `config.metadata.pbench.frontendDir`; the path in the
  id is rebuilt as relpath(rootDir/file, frontend dir).
* `suites` holds one suite per file (title = that relative path), nested suites per `describe`, and
  `specs`; each spec has one entry in `tests` per PROJECT that ran it (`projectName`), each with a
  test-level `status` ("expected" | "unexpected" | "flaky" | "skipped"), an `expectedStatus` ("passed",
  or "failed" under `test.fail()`, or "skipped") and one `results` entry per attempt (retry) whose
  `status` is "passed" | "failed" | "timedOut" | "skipped" | "interrupted".
* A skip asked for by the test (`test.skip(...)`, `test.fixme(...)`, `test.skip(cond)` inside it) has
  `expectedStatus` "skipped". A test skipped for reasons outside itself (after a failure in a
  `describe.serial` group, after `maxFailures`, when the global timeout stops the run) keeps
  `expectedStatus` "passed", with either no `results` at all or one "skipped" result of duration 0:
  which one depends on timing (both were seen for the same hanging test).
* A spec file that fails to load (syntax error, failed import, an exception at its top level) aborts the
  WHOLE run: no test runs, `suites` is empty and each failure is an entry of the top-level `errors`,
  usually with `location.file` (absolute); a failed ESM import has no location, only "... imported from
  /abs/path.spec.ts" in its message. The global timeout also writes top-level errors ("Timed out waiting
  20s for the test suite to run"), next to the tests that did run.

Outcome rules (one id, possibly several projects):

* expected + expectedStatus "passed" -> passed; expected + expectedStatus "failed" (a `test.fail()` that
  failed as announced) -> xfailed; unexpected -> failed (a failed, timed-out or interrupted attempt, or
  a `test.fail()` that passed: strict, like pytest's strict xpass); skipped -> skipped, unless an attempt
  was "interrupted" (-> failed).
* flaky (failed, then passed on a retry) -> FAILED for grading, and the id is listed in `flaky`: the
  harness runs with retries 0, so a flaky mark only comes from a run that allowed retries (flakiness
  detection), and a pass that needed a retry is not a pass of one run.
* Across projects the worst outcome wins (order of `junit._SEVERITY`: error, failed, skipped, xfailed,
  xpassed, passed), leaving out the projects whose skip the test asked for (`expectedStatus` "skipped":
  a test skipped on mobile by `test.skip(isMobile)` still passes through its desktop run) unless every
  project did. A project that skipped it WITHOUT being asked (it did not run: serial group, global
  timeout) is not left out: it counts as skipped, so a run cut short can never make a test pass. Ids
  that no project ran, none having asked for a skip, are listed in `not_run`.
* Top-level errors are collection errors, their id the spec file (frontend-relative) or
  "<playwright error>" when no file can be named (a config error, "No tests found"); global-timeout
  errors are not: they set `timed_out` (the engine's TIMEOUT, not a collection failure).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks_lib.core.constants import OUTCOME_RANK, OUTCOME_SEVERITY, Outcome
from tasks_lib.formats.junit import MESSAGE_LIMIT, JUnitReport

SEPARATOR = " › "
LOAD_ERROR_ID = "<playwright error>"
REPORT_NAME = "playwright.json"
LOAD_ERRORS_REPORT_NAME = "playwright-load-errors.json"

# Worst first (one home: tasks_lib.core.constants): when a test is reported more than once, the worst wins.
_SEVERITY = OUTCOME_SEVERITY
_RANK = OUTCOME_RANK

TEST_STATUSES = ("expected", "unexpected", "flaky", "skipped")
RESULT_STATUSES = ("passed", "failed", "timedOut", "skipped", "interrupted")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GLOBAL_TIMEOUT = re.compile(r"^Timed out waiting [\d.]+m?s for the (?:teardown for )?test suite to run")
_IMPORTED_FROM = re.compile(r"imported from (/\S+)")
# An absolute path: not the tail of a relative specifier ('./helper.mjs' holds "/helper.mjs").
_SOURCE_PATH = re.compile(r"(?<![\w.~-])(/[^\s'\"`()]+\.[cm]?[jt]sx?)\b")
_ID = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<column>\d+)(?= › |$)")
# A spec file's path alone (no `:line`, no title): a test scope's file.
_SPEC_PATH = re.compile(r"^[^:›]+\.(spec|test)\.[cm]?[jt]sx?$")


@dataclass(frozen=True)
class ProjectResult:
    """One test as one project ran it."""

    project: str
    status: str  # the test-level status: expected | unexpected | flaky | skipped
    expected_status: str  # passed | failed | skipped (| timedOut | interrupted)
    results: tuple[str, ...]  # status of each attempt, first to last (may be empty when it did not run)
    outcome: Outcome


@dataclass(frozen=True)
class PlaywrightReport(JUnitReport):
    """A JUnitReport (tests, collection_errors, totals, messages) plus what only Playwright reports.

    tests: id -> outcome, ids in PrototypeBench's form (see the module docstring).
    collection_errors: frontend-relative spec files that failed to load (or "<playwright error>").
    totals: tests / failures / errors / skipped / flaky, counted per (test, project) as Playwright does:
        failures = unexpected, errors = top-level errors.
    flaky: ids that failed and then passed on a retry in some project (their outcome is FAILED).
    not_run: ids skipped by every project without the test asking for it (serial group after a failure,
        global timeout, maxFailures): they did not run.
    timed_out: the global timeout stopped the run.
    projects: id -> the per-project detail behind its outcome.
    errors: the top-level error messages (ANSI stripped, truncated), in report order.
    version: the Playwright version that wrote the report.
    """

    flaky: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()
    timed_out: bool = False
    projects: Mapping[str, tuple[ProjectResult, ...]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()
    version: str = ""


# ---------------------------------------------------------------------------------------------
# ids


def make_test_id(file: str, line: int, column: int, titles: Iterable[str]) -> str:
    """`tests/items.spec.ts:42:3 › Items › archive button`; empty titles (anonymous describes) are left out."""
    return SEPARATOR.join([f"{file}:{line}:{column}", *(t for t in titles if t)])


def file_of(test_id: str) -> str:
    """The spec file of a Playwright test id (what a collection error names); the id itself if not one."""
    match = _ID.match(test_id)
    return match.group("file") if match else test_id


def location_of(test_id: str) -> tuple[str, int] | None:
    """(spec file, line of the `test(...)` call) of a Playwright test id; None if not one."""
    match = _ID.match(test_id)
    return (match.group("file"), int(match.group("line"))) if match else None


def is_playwright_id(test_id: str) -> bool:
    return _ID.match(test_id) is not None and SEPARATOR in test_id


def selection_args(test_ids: Iterable[str]) -> list[str]:
    """Command-line filters that run exactly these tests' locations: `tests/items.spec.ts:42` (sorted, unique);
    a spec's path alone (a test scope's file: `tests/items.spec.ts`) runs the whole file.

    Playwright reads each as "a file path regex, then :line"; a line holding a describe runs the whole block.
    """
    out = set()
    for test_id in test_ids:
        if _SPEC_PATH.match(test_id):
            out.add(test_id)
            continue
        match = _ID.match(test_id)
        if match is None:
            raise ValueError(f"not a Playwright test id: {test_id!r}")
        out.add(f"{match.group('file')}:{match.group('line')}")
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# parsing


def parse_playwright_file(path: Path | str, *, frontend_dir: str | None = None) -> PlaywrightReport:
    """`parse_playwright_json` on a file. A missing file raises FileNotFoundError; a bad one, ValueError."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: Playwright JSON is not valid UTF-8: {exc}") from exc
    try:
        return parse_playwright_json(text, frontend_dir=frontend_dir)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def parse_playwright_out(out_dir: Path | str, *, frontend_dir: str | None = None) -> PlaywrightReport:
    """The report of one harness run from its output directory.

    `playwright.json` is the report; when pbench-playwright.sh had to rerun without spec files that failed
    to load, the aborted first run is `playwright-load-errors.json` and its collection errors are added.
    """
    out_dir = Path(out_dir)
    report = parse_playwright_file(out_dir / REPORT_NAME, frontend_dir=frontend_dir)
    first = out_dir / LOAD_ERRORS_REPORT_NAME
    if first.exists():
        report = with_load_errors(report, parse_playwright_file(first, frontend_dir=frontend_dir))
    return report


def with_load_errors(report: PlaywrightReport, aborted: PlaywrightReport) -> PlaywrightReport:
    """`report` plus the collection errors (and their messages) of an aborted first run."""
    errors = list(aborted.collection_errors) + [
        e for e in report.collection_errors if e not in aborted.collection_errors
    ]
    messages = dict(report.messages)
    for error_id in aborted.collection_errors:
        if error_id in aborted.messages:
            messages.setdefault(error_id, aborted.messages[error_id])
    totals = dict(report.totals)
    totals["errors"] = totals.get("errors", 0) + aborted.totals.get("errors", 0)
    return dataclasses.replace(
        report,
        collection_errors=tuple(errors),
        messages=messages,
        totals=totals,
        errors=aborted.errors + report.errors,
    )


def parse_playwright_json(text: str, *, frontend_dir: str | None = None) -> PlaywrightReport:
    """Parse one Playwright JSON report.

    `frontend_dir` is the frontend directory as the run saw it (absolute, e.g. "/work/repo/frontend");
    by default the one the injected config recorded (`config.metadata.pbench.frontendDir`), else the
    directory of `config.configFile`. Raises ValueError on empty or malformed JSON, or JSON that is not
    a Playwright report.
    """
    if not text or not text.strip():
        raise ValueError("Playwright JSON is empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed Playwright JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict) or "suites" not in data:
        raise ValueError("not a Playwright JSON report: no 'config' object and 'suites' list")
    config = data["config"]
    root_dir = _str(config.get("rootDir"), "config.rootDir")
    base = frontend_dir or _recorded_frontend_dir(config) or root_dir
    base = posixpath.normpath(base)

    per_id: dict[str, list[ProjectResult]] = {}
    id_messages: dict[str, list[tuple[str, str]]] = {}
    for suite in _list(data.get("suites"), "suites"):
        _walk(suite, [], root_dir, base, per_id, id_messages, top=True)

    tests: dict[str, Outcome] = {}
    messages: dict[str, str] = {}
    flaky: list[str] = []
    not_run: list[str] = []
    for test_id, entries in per_id.items():
        outcome = _merge(entries)
        tests[test_id] = outcome
        if any(e.status == "flaky" for e in entries):
            flaky.append(test_id)
        if all(_not_run(e) for e in entries):
            not_run.append(test_id)
        message = _message_for(outcome, entries, id_messages.get(test_id, []))
        if message:
            messages[test_id] = message

    collection_errors: list[str] = []
    error_texts: list[str] = []
    timed_out = False
    for error in _list(data.get("errors", []), "errors"):
        if not isinstance(error, dict):
            raise ValueError("an entry of 'errors' is not an object")
        text_ = _truncate(_ANSI.sub("", str(error.get("message") or error.get("value") or "")))
        error_texts.append(text_)
        if _GLOBAL_TIMEOUT.match(text_):
            timed_out = True
            continue
        error_id = error_file(error, base) or LOAD_ERROR_ID
        if error_id not in collection_errors:
            collection_errors.append(error_id)
        if text_:
            messages.setdefault(error_id, _first_line(text_))

    stats = data.get("stats") or {}
    counts = {k: _int(stats.get(k, 0), f"stats.{k}") for k in TEST_STATUSES}
    totals = {
        "tests": sum(counts.values()),
        "failures": counts["unexpected"],
        "errors": len(error_texts),
        "skipped": counts["skipped"],
        "flaky": counts["flaky"],
    }
    return PlaywrightReport(
        tests=tests,
        collection_errors=tuple(collection_errors),
        totals=totals,
        messages=messages,
        flaky=tuple(flaky),
        not_run=tuple(not_run),
        timed_out=timed_out,
        projects={k: tuple(v) for k, v in per_id.items()},
        errors=tuple(error_texts),
        version=str(config.get("version") or ""),
    )


def error_file(error: Mapping[str, Any], frontend_dir: str) -> str | None:
    """The frontend-relative spec file a top-level error is about, or None.

    `location.file` when present; else the file after "imported from" (a failed ESM import); else the
    first absolute .js/.ts-like path in the message or stack that is not inside node_modules.
    """
    location = error.get("location")
    path = location.get("file") if isinstance(location, dict) else None
    text = _ANSI.sub("", f"{error.get('message') or ''}\n{error.get('stack') or ''}")
    if not path:
        match = _IMPORTED_FROM.search(text)
        path = match.group(1) if match else None
    if not path:
        path = next((p for p in _SOURCE_PATH.findall(text) if "/node_modules/" not in p), None)
    if not path:
        return None
    return _relative(str(path), frontend_dir)


# ---------------------------------------------------------------------------------------------
# helpers


def _walk(suite, titles, root_dir, base, per_id, id_messages, *, top=False) -> None:
    if not isinstance(suite, dict):
        raise ValueError("a suite is not an object")
    # The file-level suite's title is the file path: it is not a describe title.
    here = titles if top else [*titles, str(suite.get("title") or "")]
    for spec in _list(suite.get("specs", []), "specs"):
        _spec(spec, here, root_dir, base, per_id, id_messages)
    for child in _list(suite.get("suites", []), "suites"):
        _walk(child, here, root_dir, base, per_id, id_messages)


def _spec(spec, titles, root_dir, base, per_id, id_messages) -> None:
    if not isinstance(spec, dict):
        raise ValueError("a spec is not an object")
    title = _str(spec.get("title"), "spec.title")
    file = _str(spec.get("file"), f"spec {title!r}: file")
    line = _int(spec.get("line"), f"spec {title!r}: line")
    column = _int(spec.get("column"), f"spec {title!r}: column")
    rel = _relative(posixpath.join(root_dir, file), base)
    test_id = make_test_id(rel, line, column, [*titles, title])
    for test in _list(spec.get("tests", []), f"spec {title!r}: tests"):
        entry, message = _project_result(test, test_id)
        per_id.setdefault(test_id, []).append(entry)
        if message:
            id_messages.setdefault(test_id, []).append((entry.project, message))


def _project_result(test, test_id: str) -> tuple[ProjectResult, str]:
    if not isinstance(test, dict):
        raise ValueError(f"{test_id}: a test entry is not an object")
    status = test.get("status")
    if status not in TEST_STATUSES:
        raise ValueError(f"{test_id}: unknown test status {status!r}")
    expected = str(test.get("expectedStatus") or "passed")
    results = _list(test.get("results", []), f"{test_id}: results")
    statuses = tuple(str(r.get("status")) for r in results if isinstance(r, dict))
    unknown = [s for s in statuses if s not in RESULT_STATUSES]
    if unknown:
        raise ValueError(f"{test_id}: unknown result status {unknown[0]!r}")
    project = str(test.get("projectName") or test.get("projectId") or "")

    if status in ("unexpected", "flaky"):
        outcome = Outcome.FAILED
    elif status == "expected":
        if expected == "failed":
            outcome = Outcome.XFAILED
        elif expected == "skipped":
            outcome = Outcome.SKIPPED
        else:
            outcome = Outcome.PASSED if statuses and statuses[-1] == "passed" else Outcome.FAILED
    else:  # skipped
        outcome = Outcome.FAILED if "interrupted" in statuses else Outcome.SKIPPED

    entry = ProjectResult(project, status, expected, statuses, outcome)
    return entry, _result_message(test, outcome, results)


def _result_message(test, outcome: Outcome, results: list) -> str:
    if outcome is Outcome.PASSED:
        return ""
    for result in reversed(results):
        if not isinstance(result, dict):
            continue
        errors = result.get("errors") or ([result["error"]] if isinstance(result.get("error"), dict) else [])
        for error in errors:
            if isinstance(error, dict) and error.get("message"):
                return _truncate(_ANSI.sub("", str(error["message"])))
        if result.get("status") == "timedOut":
            return "timed out"
    for annotation in test.get("annotations") or []:
        if isinstance(annotation, dict) and annotation.get("type") in ("skip", "fixme", "fail"):
            description = annotation.get("description")
            return _truncate(
                f"{annotation['type']}: {description}" if description else str(annotation["type"])
            )
    if outcome is Outcome.SKIPPED and test.get("expectedStatus") != "skipped":
        return "not run"
    return ""


def _asked_skip(entry: ProjectResult) -> bool:
    return entry.outcome is Outcome.SKIPPED and entry.expected_status == "skipped"


def _not_run(entry: ProjectResult) -> bool:
    return entry.outcome is Outcome.SKIPPED and entry.expected_status != "skipped"


def _merge(entries: list[ProjectResult]) -> Outcome:
    """Worst outcome, leaving out the skips the test asked for unless every project skipped."""
    counted = [e.outcome for e in entries if not _asked_skip(e)]
    if not counted:
        return Outcome.SKIPPED
    return min(counted, key=lambda o: -_RANK[o])


def _message_for(outcome: Outcome, entries: list[ProjectResult], messages: list[tuple[str, str]]) -> str:
    if outcome is Outcome.PASSED:
        return ""
    projects = {e.project for e in entries if e.outcome is outcome}
    for project, message in messages:
        if project in projects:
            return _truncate(f"[{project}] {message}") if len(entries) > 1 and project else message
    return ""


def _recorded_frontend_dir(config: Mapping[str, Any]) -> str | None:
    metadata = config.get("metadata")
    pbench = metadata.get("pbench") if isinstance(metadata, dict) else None
    if isinstance(pbench, dict) and isinstance(pbench.get("frontendDir"), str):
        return pbench["frontendDir"]
    config_file = config.get("configFile")
    if isinstance(config_file, str) and config_file:
        return posixpath.dirname(config_file)
    return None


def _relative(path: str, base: str) -> str:
    path = posixpath.normpath(path)
    if not posixpath.isabs(path):
        return path
    return posixpath.relpath(path, base)


def _truncate(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _list(value, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"'{what}' is not a list")
    return value


def _str(value, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is missing or not a string")
    return value


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is missing or not a number")
    return int(value)


_LIST_COUNT = re.compile(r"^\s+(\d+) (passed|failed|flaky|skipped|interrupted|did not run)\b")


def list_summary_counts(text: str) -> dict[str, int]:
    """The counts the list reporter prints at the end of a run ("  4 passed (12.3s)", "  1 failed", …),
    from the test log (a pipe the runner reads). With several runs in one log, the last run's counts."""
    counts: dict[str, int] = {}
    for line in _ANSI.sub("", text).splitlines():
        match = _LIST_COUNT.match(line)
        if match:
            word = match.group(2)
            if word in counts:  # a second run's summary starts
                counts = {}
            counts[word] = int(match.group(1))
    return counts


_SUMMARY_ORDER = ("failed", "interrupted", "flaky", "skipped", "did not run", "passed")


def list_summary_blocks(text: str) -> int:
    """How many end-of-run summaries the list reporter's log holds: one per Playwright run. Within one summary
    the count lines follow the reporter's order (failed, interrupted, flaky, skipped, did not run, passed); a
    line that does not starts another summary."""
    blocks, last = 0, None
    for line in _ANSI.sub("", text).splitlines():
        match = _LIST_COUNT.match(line)
        if match:
            rank = _SUMMARY_ORDER.index(match.group(2))
            if last is None or rank <= last:
                blocks += 1
            last = rank
    return blocks


def cross_check_stats(stats: Mapping[str, Any], counts: Mapping[str, int]) -> list[str]:
    """Where the JSON report's stats and the list reporter's own summary in the log disagree: a JSON report
    rewritten after Playwright wrote it (by the app's dev-server code, say) shows up here."""
    expected, unexpected = int(stats.get("expected", 0)), int(stats.get("unexpected", 0))
    if not counts:
        return ["the JSON report has results but the test log has no Playwright summary"] if expected else []
    problems = []
    if counts.get("passed", 0) != expected:
        problems.append(f"{expected} passed in the JSON report, {counts.get('passed', 0)} in the test log")
    if bool(counts.get("failed", 0)) != bool(unexpected):
        problems.append(
            f"{unexpected} unexpected in the JSON report, {counts.get('failed', 0)} failed in the log"
        )
    return problems
