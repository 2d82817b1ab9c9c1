"""Per-test outcomes from pytest's JUnit XML (and from its `-rA` short test summary).

The harness runs, from the backend directory::

    python -m pytest -rA -p no:cacheprovider --junitxml=/pbench/out/junit.xml -o junit_family=xunit1 ...

`parse_junit` turns that XML into pytest node ids (exactly as pytest prints them) and outcomes.
JUnit cannot express a non-strict XPASS (pytest writes a plain pass), so `summary_outcomes` reads
the `-rA` lines of stdout and `merge_outcomes` upgrades those passes to `xpassed`.

How pytest 9 writes a `<testcase>` (xunit1; see `_pytest.junitxml.mangle_test_address`):

* `classname` is the node id's file part with "/" turned into "." and a trailing ".py" dropped,
  followed by the class names (nested classes too), all joined with "."; `name` is the function
  name with its parameter id (`test_p[br[ack]et]`, kept verbatim: it may hold ".", "::", " - ").
* `file` is the path of the file where the test FUNCTION IS DEFINED, relative to pytest's rootdir;
  `line` is 0-based. For a test inherited from a base class (or a test function imported) from
  another module, `file` names that other module while `classname` names the collecting module,
  whose path is the one in the node id. We then take the module from `classname` (see
  `_split_classname`).
* Node ids, `classname` and `file` are relative to pytest's rootdir, while the `-rA` summary is
  relative to the cwd. When the rootdir is a parent of the cwd (an ini file higher up), pass
  `rootdir_prefix` (e.g. "backend") to get the cwd-relative ids.
* A module that fails to import gives a testcase with classname "" and name = the dotted module
  path, holding `<error message="collection failure">` (no `line`). A module skipped at import
  (`pytest.skip(..., allow_module_level=True)`) gives the same shape with
  `<skipped message="collection skipped">`. Neither is a test.
* A test whose call fails AND whose teardown errors is written as two testcases with the same
  name (a `<failure>` one, then an `<error>` one); a test that passes and errors at teardown is
  one testcase with `<error>`. The worst outcome wins (`_SEVERITY`).
* The suite's `tests` attribute is not the number of distinct tests: it counts a collection skip
  as a test, and a pass followed by a teardown error twice.

With `junit_family=xunit2` there is no `file` attribute: the path is rebuilt from `classname`
(best effort, see `_split_classname`): "a.b.c" reads as "a/b/c.py", so a directory with a dot in
its name, or a non-.py test file (doctest .txt), is rebuilt wrongly.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tasks_lib.core.constants import OUTCOME_RANK, OUTCOME_SEVERITY, Outcome

MESSAGE_LIMIT = 500

# Worst first (one home: tasks_lib.core.constants): when a test is reported more than once, the worst wins.
_SEVERITY = OUTCOME_SEVERITY
_RANK = OUTCOME_RANK

COLLECTION_FAILURE = "collection failure"
COLLECTION_SKIPPED = "collection skipped"
INTERNAL_ERROR_ID = "<pytest internal error>"
# pytest writes this as <skipped> (no type) for a FAILED report that carries `wasxfail`.
_XPASS_AS_FAILURE = "xfail-marked test passes unexpectedly"

_TOTAL_KEYS = ("tests", "failures", "errors", "skipped")


@dataclass(frozen=True)
class JUnitReport:
    """What one pytest run reported.

    tests: node id -> outcome, ids relative to the directory pytest ran from (after
        `rootdir_prefix` is stripped).
    collection_errors: paths (or node ids, for a class that failed to collect) whose collection
        failed; "<pytest internal error>" if pytest hit an INTERNALERROR. Never in `tests`.
    totals: the <testsuite> counters tests/failures/errors/skipped, summed over the suites.
    messages: short failure/error/skip/xfail message per test id (and per collection error),
        at most MESSAGE_LIMIT characters.
    collection_skipped: paths of modules skipped as a whole at import time.
    """

    tests: dict[str, Outcome]
    collection_errors: tuple[str, ...]
    totals: dict[str, int]
    messages: dict[str, str]
    collection_skipped: tuple[str, ...] = field(default=())


# ---------------------------------------------------------------------------------------------
# JUnit XML


def parse_junit_file(path: Path | str, *, rootdir_prefix: str = "") -> JUnitReport:
    """`parse_junit` on a file. A missing file raises FileNotFoundError; a bad one, ValueError."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: JUnit XML is not valid UTF-8: {exc}") from exc
    try:
        return parse_junit(text, rootdir_prefix=rootdir_prefix)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def parse_junit(xml_text: str, *, rootdir_prefix: str = "") -> JUnitReport:
    """Parse pytest's JUnit XML (xunit1, or xunit2 best effort) into a JUnitReport.

    `rootdir_prefix` ("backend" or "backend/") is stripped from paths that start with it, for a
    run whose rootdir is a parent of the directory it ran from. Raises ValueError on empty or
    malformed XML, or XML that is not a JUnit report.
    """
    root = _parse_xml(xml_text)
    if root.tag == "testsuites":
        suites = root.findall("testsuite")
    elif root.tag == "testsuite":
        suites = [root]
    else:
        raise ValueError(f"not a JUnit report: root element is <{root.tag}>, not <testsuites>/<testsuite>")

    totals = dict.fromkeys(_TOTAL_KEYS, 0)
    for suite in suites:
        for key in _TOTAL_KEYS:
            value = suite.get(key, "0")
            try:
                totals[key] += int(value)
            except ValueError:
                raise ValueError(f"<testsuite> attribute {key}={value!r} is not an integer") from None

    cases = [case for suite in suites for case in suite.iter("testcase")]
    prefix = rootdir_prefix.strip("/")
    known_modules = _known_modules(cases, prefix)

    tests: dict[str, Outcome] = {}
    messages: dict[str, str] = {}
    collection_errors: list[str] = []
    collection_skipped: list[str] = []
    for case in cases:
        outcome, message = _case_outcome(case)
        kind = _collection_kind(case)
        if kind is not None:
            target = collection_errors if kind == COLLECTION_FAILURE else collection_skipped
            node_id = _collection_id(case, prefix, known_modules)
            if node_id not in target:
                target.append(node_id)
            if kind == COLLECTION_FAILURE and message:
                messages.setdefault(node_id, message)
            continue
        node_id = _node_id(case, prefix, known_modules)
        previous = tests.get(node_id)
        if previous is None or _RANK[outcome] > _RANK[previous]:
            tests[node_id] = outcome
            if message:
                messages[node_id] = message
            else:
                messages.pop(node_id, None)
    return JUnitReport(
        tests=tests,
        collection_errors=tuple(collection_errors),
        totals=totals,
        messages=messages,
        collection_skipped=tuple(collection_skipped),
    )


def _parse_xml(xml_text: str) -> ET.Element:
    if not xml_text or not xml_text.strip():
        raise ValueError("JUnit XML is empty")
    # pytest never writes a DTD; refusing one keeps entity-expansion tricks out.
    if "<!DOCTYPE" in xml_text or "<!ENTITY" in xml_text:
        raise ValueError("JUnit XML must not contain a DOCTYPE or ENTITY declaration")
    try:
        return ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ValueError(f"malformed JUnit XML: {exc}") from exc


def _truncate(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _case_outcome(case: ET.Element) -> tuple[Outcome, str]:
    """The worst outcome among the testcase's children (none -> passed), and its message."""
    best: tuple[Outcome, str] = (Outcome.PASSED, "")
    for child in case:
        message = child.get("message") or ""
        if child.tag == "failure":
            outcome = Outcome.FAILED
        elif child.tag == "error":
            outcome = Outcome.ERROR
            if message == COLLECTION_FAILURE:
                message = _collection_error_line(child.text or "") or message
        elif child.tag == "skipped":
            if child.get("type") == "pytest.xfail":
                outcome = Outcome.XFAILED
            elif message == _XPASS_AS_FAILURE:
                outcome = Outcome.FAILED
            else:
                outcome = Outcome.SKIPPED
        else:  # system-out, system-err, properties
            continue
        if not message and child.text:
            message = child.text.strip().splitlines()[0] if child.text.strip() else ""
        if _RANK[outcome] > _RANK[best[0]]:
            best = (outcome, _truncate(message))
    return best


def _collection_error_line(text: str) -> str:
    """The line that says why collection failed: the last 'E   ...' line, else the first line."""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if lines:
        return lines[-1]
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _collection_kind(case: ET.Element) -> str | None:
    """COLLECTION_FAILURE / COLLECTION_SKIPPED if the testcase reports a collector, else None."""
    for child in case:
        message = child.get("message")
        if child.tag == "error" and message == COLLECTION_FAILURE:
            return COLLECTION_FAILURE
        if child.tag == "error" and message == "internal error" and case.get("classname") == "pytest":
            return COLLECTION_FAILURE
        if child.tag == "skipped" and message == COLLECTION_SKIPPED and "line" not in case.attrib:
            return COLLECTION_SKIPPED
    return None


def _collection_id(case: ET.Element, prefix: str, known_modules: dict[str, str]) -> str:
    classname = case.get("classname", "")
    name = case.get("name", "")
    if classname == "pytest" and name == "internal":
        return INTERNAL_ERROR_ID
    if classname:  # a class (not a module) failed to collect: it has a node id of its own
        return _node_id(case, prefix, known_modules)
    file = case.get("file")
    if file is not None:
        return _strip_path_prefix(file, prefix)
    return _module_to_path(_strip_dotted_prefix(name, prefix), known_modules)


def _dotted(path: str) -> str:
    """The dotted form pytest gives a path in `classname` (mangle_test_address)."""
    return re.sub(r"\.py$", "", path.replace("/", "."))


def _strip_path_prefix(path: str, prefix: str) -> str:
    if prefix and path.startswith(prefix + "/"):
        return path[len(prefix) + 1 :]
    return path


def _strip_dotted_prefix(dotted: str, prefix: str) -> str:
    dotted_prefix = _dotted(prefix) + "." if prefix else ""
    if dotted_prefix and dotted.startswith(dotted_prefix):
        return dotted[len(dotted_prefix) :]
    return dotted


def _known_modules(cases: Iterable[ET.Element], prefix: str) -> dict[str, str]:
    """dotted module -> path, from every testcase whose `file` agrees with its `classname`."""
    modules: dict[str, str] = {}
    for case in cases:
        file = case.get("file")
        if file is None:
            continue
        file = _strip_path_prefix(file, prefix)
        module = _dotted(file)
        classname = _strip_dotted_prefix(case.get("classname", ""), prefix)
        if not classname:  # collection reports: the name is the dotted module
            classname = _strip_dotted_prefix(case.get("name", ""), prefix)
        if classname == module or classname.startswith(module + "."):
            modules[module] = file
    return modules


def _split_classname(classname: str, known_modules: dict[str, str]) -> tuple[str, list[str]]:
    """Split "pkg.mod.TestA.TestB" into ("pkg/mod.py", ["TestA", "TestB"]).

    Used when `file` is missing (xunit2) or names another module (inherited or imported tests).
    The longest module seen elsewhere in the same report wins; failing that, the class part
    starts at the first component that begins with an upper-case letter (pytest's default
    `python_classes = Test*`), so a module or package whose name starts with an upper-case
    letter is misread.
    """
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module in known_modules:
            return known_modules[module], parts[end:]
    end = next((i for i in range(1, len(parts)) if parts[i][:1].isupper()), len(parts))
    return _module_to_path(".".join(parts[:end]), known_modules), parts[end:]


def _module_to_path(module: str, known_modules: dict[str, str]) -> str:
    return known_modules.get(module) or module.replace(".", "/") + ".py"


def _node_id(case: ET.Element, prefix: str, known_modules: dict[str, str]) -> str:
    name = case.get("name")
    if not name:
        raise ValueError(f"<testcase> without a name (classname={case.get('classname')!r})")
    classname = _strip_dotted_prefix(case.get("classname", ""), prefix)
    file = case.get("file")
    if file is not None:
        file = _strip_path_prefix(file, prefix)
        module = _dotted(file)
        if classname == module:
            return f"{file}::{name}"
        if classname.startswith(module + "."):
            return "::".join([file, *classname[len(module) + 1 :].split("."), name])
    if not classname:  # a test item directly under the session (plugins); best effort
        return f"{file}::{name}" if file else name
    path, classes = _split_classname(classname, known_modules)
    return "::".join([path, *classes, name])


# ---------------------------------------------------------------------------------------------
# -rA short test summary

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_SECTION_END = re.compile(r"^(=+ .* =+|!+ .* !+)$")
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$")
_PHASE = re.compile(r"^at (?:setup|call|teardown) of ")  # pytest 9: "XFAIL at setup of <id> - ..."
_SUMMARY_WORDS = {
    "PASSED": Outcome.PASSED,
    "FAILED": Outcome.FAILED,
    "ERROR": Outcome.ERROR,
    "SKIPPED": Outcome.SKIPPED,
    "XFAIL": Outcome.XFAILED,
    "XPASS": Outcome.XPASSED,
}


def summary_outcomes(text: str, *, known_ids: Iterable[str] = ()) -> dict[str, Outcome]:
    """Outcomes from the `-rA` short test summary in pytest's stdout.

    Only the LAST "short test summary info" section is read (captured output of the tests, which
    -rA echoes earlier, cannot inject lines); no such section -> {}. "SKIPPED [n] file:line:
    reason" lines carry no id and are ignored. A collection error reads "ERROR path" and is
    returned with the path as its id. Ids are relative to the cwd of the run. An id repeated
    (passed, then errored at teardown) keeps the worst outcome.

    A line is "WORD id" or "WORD id - message", and a parameter id may itself hold " - ". The id
    is the longest of `known_ids` (e.g. the JUnit ids) the line starts with; otherwise the first
    cut at " - " that leaves balanced-looking brackets ("...[x - y]" rather than "...[x").
    """
    lines = _ANSI.sub("", text).splitlines()
    start = max((i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line)), default=None)
    if start is None:
        return {}
    by_length = sorted(set(known_ids), key=len, reverse=True)
    outcomes: dict[str, Outcome] = {}
    for line in lines[start + 1 :]:
        if _SECTION_END.match(line):
            break
        match = _SUMMARY_LINE.match(line)
        if match is None:
            continue
        word, rest = match.groups()
        if word == "SKIPPED" and rest.startswith("["):
            continue
        node_id = _summary_id(_PHASE.sub("", rest), by_length)
        outcome = _SUMMARY_WORDS[word]
        previous = outcomes.get(node_id)
        if previous is None or _RANK[outcome] > _RANK[previous]:
            outcomes[node_id] = outcome
    return outcomes


_FINAL_LINE = re.compile(r"^=+ .*\bin \d+(?:\.\d+)?s\b.* =+$")


def summary_sections(text: str) -> tuple[int, int]:
    """How many "short test summary info" sections and final "N passed in Xs" lines a log holds. pytest
    prints one of each per run; more means something else printed them (the cross-check must not be able
    to pick the forged one)."""
    lines = _ANSI.sub("", text).splitlines()
    return (
        sum(1 for line in lines if _SUMMARY_HEADER.match(line)),
        sum(1 for line in lines if _FINAL_LINE.match(line)),
    )


def _summary_id(rest: str, known_ids: list[str]) -> str:
    for known in known_ids:
        if rest == known or rest.startswith(known + " - "):
            return known
    cuts = [m.start() for m in re.finditer(" - ", rest)]
    for cut in cuts:
        candidate = rest[:cut]
        if "[" not in candidate or candidate.endswith("]"):
            return candidate
    return rest[: cuts[0]] if cuts else rest.rstrip()


def merge_outcomes(junit: JUnitReport, summary: dict[str, Outcome]) -> JUnitReport:
    """Upgrade `passed` to `xpassed` where the -rA summary says XPASS; change nothing else."""
    tests = {
        node_id: Outcome.XPASSED
        if outcome is Outcome.PASSED and summary.get(node_id) is Outcome.XPASSED
        else outcome
        for node_id, outcome in junit.tests.items()
    }
    return dataclasses.replace(junit, tests=tests)


_BAD = frozenset({Outcome.FAILED, Outcome.ERROR})


def cross_check(
    tests: dict[str, Outcome], summary: dict[str, Outcome], collection_errors: Iterable[str] = ()
) -> list[str]:
    """Where the JUnit report and pytest's own `-rA` summary (read from the piped stdout) disagree.

    Two records of one run: a report rewritten after pytest wrote it, or stdout forged with PASSED lines,
    shows up as a disagreement. A test counts as agreeing when both put it on the same side of
    pass/fail; skipped tests may be absent from the summary (its SKIPPED lines carry no id), and a class
    that failed to collect is a collection error in JUnit but an "ERROR path::Class" line in the summary.
    """
    problems = []
    broken = set(collection_errors)
    if tests and not summary:
        return ["the JUnit report lists tests but pytest's output has no short test summary"]
    for node_id, outcome in tests.items():
        said = summary.get(node_id)
        if said is None:
            if outcome is not Outcome.SKIPPED:
                problems.append(f"{node_id}: {outcome} in JUnit, absent from pytest's summary")
        elif (outcome in _BAD) != (said in _BAD):
            problems.append(f"{node_id}: {outcome} in JUnit, {said} in pytest's summary")
    for node_id, said in summary.items():
        if "::" in node_id and node_id not in tests and node_id not in broken:
            problems.append(f"{node_id}: {said} in pytest's summary, absent from JUnit")
    return problems
