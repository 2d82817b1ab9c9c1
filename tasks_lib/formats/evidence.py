"""The evidence channel of a pytest run, and every record of the run cross-checked against it (pure).

The launcher (containers/runner/pbench_audit.py) sends, as they happen, one message per test report and per
finding through a socket the root runner reads to its end; the runner writes them to `evidence.log`, each with
the id of the process that sent it, as the kernel attached it. What the tested process printed or wrote
(JUnit, the short test summary, the final count line, the FAILURES and ERRORS sections) is then read against
that record: any disagreement is tampering, as is a message from another process, or a channel that ended
before the launcher's end message.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tasks_lib.core.constants import OUTCOME_RANK, Outcome

CATEGORIES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append({"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


@dataclass
class Channel:
    """What the evidence log holds."""

    started: bool = False
    declared: int | None = None  # the number of T/C messages the launcher's end message says it sent
    reports: list[tuple[str, str, str, bool]] = field(default_factory=list)  # nodeid, when, outcome, xfail
    collect: list[tuple[str, str]] = field(default_factory=list)  # nodeid, outcome
    findings: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # messages from another process
    verbosity: int = 0  # pytest's, as configured: below -1 it prints no final count line
    tbstyle: str = "short"  # "no": no FAILURES section
    malformed: int = 0

    @property
    def ended(self) -> bool:
        return self.declared is not None


def read_channel(text: str, launcher_pid: int | None) -> Channel:
    """`evidence.log` (lines `pid<TAB>kind<TAB>fields...`) of the launcher whose process id is `launcher_pid`."""
    ch = Channel()
    for line in text.splitlines():
        pid, _, message = line.partition("\t")
        fields = [_unescape(f) for f in message.split("\t")]
        if launcher_pid is not None and pid != str(launcher_pid):
            ch.foreign.append(f"{pid}: {message[:120]}")
            continue
        kind = fields[0]
        if ch.ended:
            ch.foreign.append(f"{pid}: {message[:120]} (after the end message)")
        elif kind == "S" and len(fields) == 2:
            ch.started = True
        elif kind == "T" and len(fields) == 5:
            ch.reports.append((fields[1], fields[2], fields[3], fields[4] == "1"))
        elif kind == "C" and len(fields) == 3:
            ch.collect.append((fields[1], fields[2]))
        elif kind == "V" and len(fields) == 3 and fields[1].lstrip("-").isdigit():
            ch.verbosity, ch.tbstyle = int(fields[1]), fields[2]
        elif kind == "F" and len(fields) == 2:
            ch.findings.append(fields[1])
        elif kind == "E" and len(fields) == 2 and fields[1].isdigit():
            ch.declared = int(fields[1])
        else:
            ch.malformed += 1
    return ch


def _phase_outcome(when: str, outcome: str, xfail: bool) -> Outcome | None:
    """One report's share of its test's outcome (as pytest's JUnit and terminal reporters count it)."""
    if outcome == "failed":
        return Outcome.FAILED if when == "call" else Outcome.ERROR
    if outcome == "skipped":
        return Outcome.XFAILED if xfail else Outcome.SKIPPED
    if outcome == "passed" and when == "call":
        return Outcome.XPASSED if xfail else Outcome.PASSED
    return None


def outcomes(ch: Channel) -> dict[str, Outcome]:
    """Per-test outcome from the reports: the worst of its phases wins."""
    out: dict[str, Outcome] = {}
    for nodeid, when, outcome, xfail in ch.reports:
        got = _phase_outcome(when, outcome, xfail)
        if got is None:
            continue
        previous = out.get(nodeid)
        if previous is None or OUTCOME_RANK[got] < OUTCOME_RANK[previous]:
            out[nodeid] = got
    return out


def collection_errors(ch: Channel) -> list[str]:
    return [nodeid for nodeid, outcome in ch.collect if outcome == "failed"]


def terminal_counts(ch: Channel) -> Counter:
    """The numbers pytest's final line prints, from the reports: one per report category (a test whose call
    fails and whose teardown errors counts as one failed and one error)."""
    counts: Counter = Counter()
    for _nodeid, when, outcome, xfail in ch.reports:
        got = _phase_outcome(when, outcome, xfail)
        if got is not None:
            counts[str(got)] += 1
    for _nodeid, outcome in ch.collect:
        counts["error" if outcome == "failed" else "skipped"] += 1
    return counts


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FINAL = re.compile(
    r"^(?:=+ )?(?P<body>(?:\d+ [a-z]+(?:, )?)+|no tests ran) in \d+(?:\.\d+)?s(?: \([0-9:.]+\))?(?: =+)?$"
)
_COUNT = re.compile(
    r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|warnings?|deselected|rerun|reruns)"
)
_SECTION = re.compile(r"^=+ (?P<name>[A-Za-z ]+?) =+$")
_HEADER = re.compile(r"^_+ (?P<head>.+?) _+$")  # long names leave one "_" on each side


def final_counts(log: str) -> dict[str, int] | None:
    """The counts of pytest's last final line ("=== 1 failed, 3 passed in 0.4s ==="), None without one."""
    lines = _ANSI.sub("", log).splitlines()
    for line in reversed(lines):
        match = _FINAL.match(line)
        if match is not None:
            counts = {}
            for n, word in _COUNT.findall(match.group("body")):
                key = {"errors": "error", "warnings": "warning", "reruns": "rerun"}.get(word, word)
                counts[key] = int(n)
            return counts
    return None


def sections(log: str) -> dict[str, list[str]]:
    """The test headers of the FAILURES and ERRORS sections ("___ test_x ___", "___ ERROR at setup of ..."),
    {} for a section the log does not have."""
    out: dict[str, list[str]] = {}
    current = None
    for line in _ANSI.sub("", log).splitlines():
        match = _SECTION.match(line)
        if match is not None:
            current = (
                match.group("name").strip() if match.group("name").strip() in ("FAILURES", "ERRORS") else None
            )
            if current is not None:
                out.setdefault(current, [])
            continue
        if current is not None:
            header = _HEADER.match(line)
            if header is not None:
                out[current].append(header.group("head"))
    return out


def head_line(nodeid: str) -> str:
    """pytest's header of a test in FAILURES: the node id without its file, classes joined by dots."""
    return ".".join(nodeid.split("::")[1:]) or nodeid


def channel_integrity(ch: Channel) -> list[str]:
    """What no honest run puts on the channel, whatever became of it: messages from another process, messages
    that are not the launcher's."""
    problems = []
    if ch.foreign:
        problems.append(
            f"the evidence channel holds {len(ch.foreign)} message(s) from another process: {ch.foreign[0]}"
        )
    if ch.malformed:
        problems.append(f"the evidence channel holds {ch.malformed} malformed message(s)")
    return problems


def cross_check(
    ch: Channel,
    *,
    junit: Mapping[str, Outcome],
    junit_collection_errors: Iterable[str],
    log: str,
    complete_log: bool = True,
) -> list[str]:
    """Every way the run's records disagree with the channel (tampering). `junit`: the JUnit outcomes (with
    the summary's XPASS); `complete_log`: the log was not cut at the output cap."""
    if not ch.started:
        return [
            "the evidence channel holds no start message from the launcher (its test process never started it)"
        ]
    problems = channel_integrity(ch)
    if not ch.ended:
        problems.append(
            "the evidence channel ended before the launcher's end message (the test process ended early)"
        )
    elif ch.declared != len(ch.reports) + len(ch.collect):
        problems.append(
            f"the launcher sent {ch.declared} report message(s), the channel holds {len(ch.reports) + len(ch.collect)}"
        )
    seen = outcomes(ch)
    for nodeid in sorted(set(seen) | set(junit)):
        a, b = seen.get(nodeid), junit.get(nodeid)
        if a != b and not (a is Outcome.XPASSED and b is Outcome.PASSED):
            problems.append(
                f"{nodeid}: {a or 'absent'} as the tests ran, {b or 'absent'} in the JUnit report"
            )
    if set(collection_errors(ch)) != set(junit_collection_errors):
        problems.append(
            f"collection errors as the tests ran {sorted(collection_errors(ch))}, in the JUnit report "
            f"{sorted(junit_collection_errors)}"
        )
    if not complete_log or not (ch.reports or ch.collect):
        return problems[:50]
    counts = terminal_counts(ch)
    final = final_counts(log)
    if ch.verbosity < -1:
        pass  # -qq: pytest prints no final count line
    elif final is None:
        problems.append("pytest's output has no final count line")
    else:
        differ = [
            f"{k}: {counts.get(k, 0)} ran, {final.get(k, 0)} printed"
            for k in CATEGORIES
            if counts.get(k, 0) != final.get(k, 0)
        ]
        if differ:
            problems.append(
                "pytest's final count line disagrees with the tests as they ran (" + "; ".join(differ) + ")"
            )
    if ch.tbstyle == "no":
        return problems[:50]
    found = sections(log)
    names = {head_line(n) for n, *_ in ch.reports} | {n for n, _ in ch.collect}
    failed = Counter(
        head_line(n) for n, when, outcome, _x in ch.reports if when == "call" and outcome == "failed"
    )
    errors = Counter(
        f"ERROR at {when} of {head_line(n)}"
        for n, when, outcome, _x in ch.reports
        if when != "call" and outcome == "failed"
    ) + Counter(f"ERROR collecting {n}" for n, o in ch.collect if o == "failed")
    for section, want in (("FAILURES", failed), ("ERRORS", errors)):
        got = Counter(h for h in found.get(section, []) if h in names or h.startswith("ERROR "))
        if got != want:
            missing, extra = sorted((want - got).elements())[:3], sorted((got - want).elements())[:3]
            problems.append(
                f"pytest's {section} section disagrees with the tests as they ran "
                f"(missing: {missing or 'none'}; not failed as they ran: {extra or 'none'})"
            )
    return problems[:50]
