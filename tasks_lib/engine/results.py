"""Reading what a test container left in /pbench/out, through a registry keyed by the runner the source names.

Every reader fills the same RunResult: per-test outcomes (witnesses taken out), evidence that the suite ran,
the cross-check of the run's records, and what the guards saw (tampering).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

from tasks_lib.core.constants import Blame, Outcome, RunStatus
from tasks_lib.engine import witnesses
from tasks_lib.engine.records import RunResult
from tasks_lib.formats import evidence, junit, playwright_report
from tasks_lib.protocol import wire

# The runner's statuses that are not the host's own (every other one is a RunStatus of the same name).
_RUNNER_STATUS = {
    wire.RunnerStatus.OUTPUT_LIMIT: RunStatus.OUTPUT_LIMIT,
    wire.RunnerStatus.SERVE_EXITED: RunStatus.PRESTART_FAILED,
}
PATCH_PHASES = wire.PATCH_PHASES
last_phase = wire.last_phase


def blame_for_stop(out: Path) -> str:
    return Blame.PATCH if last_phase(out) in PATCH_PHASES else Blame.HARNESS


def _log(out: Path, name: str = "test.log") -> str:
    path = out / name
    return path.read_text(errors="replace") if path.exists() else ""


def runner_result(result: RunResult, out: Path, runner_exit: int | None) -> dict | None:
    """The common part of /pbench/out/result.json; None when the run did not reach its tests."""
    res = wire.read_result(out)
    if res is None:
        result.status = RunStatus.INFRA_ERROR
        result.error = (
            f"the runner wrote no {wire.RESULT_FILE} (runner exit {runner_exit}); see container.log"
        )
        return None
    result.patch_methods = {p["name"]: p["method"] for p in res.get("patches", [])}
    result.restored = res.get("restored", [])
    result.restored_why = res.get("restored_why", {})
    result.tampering += res.get("tampering", [])
    result.timings.update({k: float(v) for k, v in res.get("timings", {}).items() if k.endswith("_s")})
    status = res["status"]
    result.status = _RUNNER_STATUS.get(status) or RunStatus(status)
    if result.status == RunStatus.OUTPUT_LIMIT:
        limit = res.get("output_limit", {})
        result.blame = Blame.PATCH
        result.error = (
            f"output over the cap of {limit.get('cap')} bytes (by {limit.get('by')}): the run was stopped"
        )
        return None
    if result.status == RunStatus.PRESTART_FAILED:
        result.blame = Blame.PATCH
    if result.status != RunStatus.COMPLETED:
        return None
    result.exit_code = res["test"]["exit_code"]
    return res


def set_report(result: RunResult, report, witness_list: list) -> None:
    result.tests = dict(report.tests)
    result.collection_errors = list(report.collection_errors)
    result.messages = dict(report.messages)
    # Evidence the suite ran: a report with tests in it, and the runner's own "tests ran" exit codes.
    result.suite_ran = bool(result.tests) and result.exit_code in (0, 1)
    bad = any(o in (Outcome.FAILED, Outcome.ERROR) for o in result.tests.values()) or result.collection_errors
    result.exit_code_mismatch = (result.exit_code == 0 and bool(bad)) or (result.exit_code == 1 and not bad)
    if witness_list:
        result.messages = {witnesses.unshift(k, witness_list): v for k, v in result.messages.items()}
        result.tests, hard, soft = witnesses.check(
            witness_list, result.tests, result.suite_ran, result.collection_errors
        )
        result.tampering += hard
        result.witness_doubts += soft
        result.suite_ran = result.suite_ran and bool(result.tests)


def _witnesses(res: dict) -> list:
    return [witnesses.Witness.from_result(w) for w in res.get("witnesses") or []]


def read_pytest(result: RunResult, out: Path, runner_exit: int | None, **_) -> None:
    res = runner_result(result, out, runner_exit)
    if res is None:
        return
    junit_path = out / "junit.xml"
    if not junit_path.exists():
        result.error = f"no JUnit XML written ({_ended(result.exit_code)})"
        _read_channel(result, out, res, None, "")
        return
    try:
        report = junit.parse_junit_file(junit_path)
    except ValueError as exc:
        result.error = f"unreadable JUnit XML ({_ended(result.exit_code)}): {exc}"
        _read_channel(result, out, res, None, "")
        return
    log_text = _log(out)
    sections, finals = junit.summary_sections(log_text)
    if sections > 1 or finals > 1:
        result.tampering.append(
            f"the test log holds {sections} short test summaries and {finals} final count lines; pytest prints one"
        )
    summary = junit.summary_outcomes(log_text, known_ids=report.tests)
    result.report_disagreements = junit.cross_check(report.tests, summary, report.collection_errors)[:50]
    merged = junit.merge_outcomes(report, summary)
    _read_channel(result, out, res, merged, log_text)
    set_report(result, merged, _witnesses(res))


def _ended(exit_code: int | None) -> str:
    """How the test process ended, in words (a negative exit code is the signal that killed it)."""
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"the test process was killed by {name} before it wrote its report"
    return f"test exit {exit_code}"


def _read_channel(result: RunResult, out: Path, res: dict, report, log_text: str) -> None:
    """The launcher's evidence channel: its findings, and every other record read against it. Without a
    report (the test process died first, or left none that can be read) nothing can pass and there is no
    record to hold against the channel: only what no honest run puts on it counts; that the channel stops
    early and the tests it saw are not in a report is the crash itself, named in the run's error."""
    test = res.get("test") or {}
    path = out / "evidence.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    channel = evidence.read_channel(text, test.get("pid"))
    result.tampering += channel.findings
    if report is None:
        result.tampering += evidence.channel_integrity(channel)
        return
    complete = "[pbench: output over the cap" not in log_text
    result.tampering += evidence.cross_check(
        channel,
        junit=report.tests,
        junit_collection_errors=report.collection_errors,
        log=log_text,
        complete_log=complete,
    )


def read_playwright(result: RunResult, out: Path, runner_exit: int | None, *, frontend_dir: str) -> None:
    res = runner_result(result, out, runner_exit)
    if res is None:
        return
    if result.exit_code == 3:  # the frontend server never answered
        result.status = RunStatus.PRESTART_FAILED
        result.blame = Blame.PATCH
        result.error = "the frontend server did not answer (see serve.log)"
        return
    try:
        report = playwright_report.parse_playwright_out(out, frontend_dir=f"/work/repo/{frontend_dir}")
    except (OSError, ValueError) as exc:
        result.error = f"no readable Playwright report (test exit {result.exit_code}): {exc}"
        return
    log_text = _log(out)
    runs = int((res.get("test") or {}).get("runs") or 1)
    blocks = playwright_report.list_summary_blocks(log_text)
    if blocks > runs:
        result.tampering.append(f"the test log holds {blocks} Playwright summaries for {runs} run(s)")
    json_path = out / playwright_report.REPORT_NAME
    if json_path.exists() and not (out / playwright_report.LOAD_ERRORS_REPORT_NAME).exists():
        try:
            stats = json.loads(json_path.read_text()).get("stats", {})
        except (ValueError, AttributeError):
            stats = {}
        result.report_disagreements = playwright_report.cross_check_stats(
            stats, playwright_report.list_summary_counts(log_text)
        )
    set_report(result, report, _witnesses(res))
    if report.timed_out:
        result.status = RunStatus.TIMEOUT
        result.blame = Blame.PATCH
        result.error = "Playwright's global timeout (the run's wall clock) stopped the suite"
