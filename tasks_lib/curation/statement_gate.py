"""The leak gate: a problem statement never hands the agent the answer (pure; rules are data/statement_rules.toml).

Computed from the instance itself, whatever the statement's source. A statement leaks when it
  * names a hidden test: a FAIL_TO_PASS or PASS_TO_PASS function (pytest) or title (Playwright);
  * names a test file the test patch adds or changes (its path, or its file name);
  * quotes a line of the reference or the test patch (an added or removed line, whitespace collapsed, long
    enough to be specific);
  * holds a diff (a hunk header, `diff --git`, `+++ b/` lines).
`check` names what leaked; `clean` drops the markdown sections of a PR description that describe the testing or
the implementation and checks again; `words` counts what is left, for the underspecified rule.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tasks_lib.core import paths
from tasks_lib.formats.changed_tests import strip_params

_WS = re.compile(r"\s+")
_DIFF = re.compile(r"(?m)^(@@ -\d+(,\d+)? \+\d+(,\d+)? @@|diff --git |\+\+\+ b/|--- a/)")
_HEADING = re.compile(r"(?m)^(#{1,6})\s+(.+?)\s*#*\s*$|^\*\*(.+?)\*\*:?\s*$")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Rules:
    min_quote_chars: int = 24
    min_function_chars: int = 8
    min_title_chars: int = 12
    headings: tuple[str, ...] = ()
    min_words: int = 10


@functools.cache
def rules() -> Rules:
    data = tomllib.loads((paths.data_dir() / "statement_rules.toml").read_text())
    return Rules(
        min_quote_chars=int(data["quote"]["min_chars"]),
        min_function_chars=int(data["names"]["min_function_chars"]),
        min_title_chars=int(data["names"]["min_title_chars"]),
        headings=tuple(h.lower() for h in data["sections"]["headings"]),
        min_words=int(data["underspecified"]["min_words"]),
    )


@dataclass
class Verdict:
    """What leaked (empty: nothing), by kind: test, file, quote, diff."""

    findings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def leaks(self) -> bool:
        return bool(self.findings)

    def reason(self) -> str:
        return "; ".join(f"{kind}: {what}" for kind, what in self.findings[:5]) + (
            f" (+{len(self.findings) - 5} more)" if len(self.findings) > 5 else ""
        )


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _tests(instance: Mapping) -> Iterable[str]:
    for key in ("fail_to_pass", "pass_to_pass"):
        for side in ("backend", "frontend"):
            yield from (instance.get(key) or {}).get(side) or []


def test_names(instance: Mapping, r: Rules) -> set[str]:
    """Function names of the pytest ids, titles of the Playwright ids, long enough to be specific."""
    out = set()
    for test_id in _tests(instance):
        if " › " in test_id:
            title = test_id.split(" › ")[-1].strip()
            if len(title) >= r.min_title_chars:
                out.add(title)
        else:
            name = strip_params(test_id).split("::")[-1]
            if len(name) >= r.min_function_chars:
                out.add(name)
    return out


def _diff_files(diff: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"(?m)^\+\+\+ b/(\S+)", diff or "")}


def _diff_lines(diff: str, r: Rules) -> set[str]:
    out = set()
    for line in (diff or "").splitlines():
        if line[:1] in "+-" and not line.startswith(("+++", "---")):
            text = _norm(line[1:])
            if len(text) >= r.min_quote_chars:
                out.add(text)
    return out


def check(statement: str, instance: Mapping, r: Rules | None = None) -> Verdict:
    """What of the instance's answer `statement` holds."""
    r = r or rules()
    verdict = Verdict()
    text = statement or ""
    flat = _norm(text)
    lower = text.lower()
    for name in sorted(test_names(instance, r)):
        if re.search(rf"(?<![\w]){re.escape(name.lower())}(?![\w])", lower):
            verdict.findings.append(("test", name))
    for path in sorted(_diff_files(instance.get("test_patch") or "")):
        base = path.rsplit("/", 1)[-1]
        if path in text or re.search(rf"(?<![\w/.-]){re.escape(base)}(?![\w])", text):
            verdict.findings.append(("file", path))
    for which in ("patch", "test_patch"):
        for line in sorted(_diff_lines(instance.get(which) or "", r)):
            if line in flat:
                verdict.findings.append(("quote", f"{which}: {line[:80]}"))
    if _DIFF.search(text):
        verdict.findings.append(("diff", "a diff hunk or file header"))
    return verdict


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of a markdown text; the part before the first heading has heading ""."""
    out, heading, start = [], "", 0
    for match in _HEADING.finditer(text):
        out.append((heading, text[start : match.start()]))
        heading, start = (match.group(2) or match.group(3) or "").strip(), match.start()
    out.append((heading, text[start:]))
    return [(h, b) for h, b in out if b.strip()]


def _is_dropped(heading: str, r: Rules) -> bool:
    words = " ".join(_WORD.findall(heading.lower()))
    return any(re.search(rf"(?<!\w){re.escape(h)}(?!\w)", words) for h in r.headings)


def clean(statement: str, r: Rules | None = None) -> tuple[str, list[str]]:
    """The statement without its testing / implementation sections, and the headings dropped."""
    r = r or rules()
    kept, dropped = [], []
    for heading, body in sections(statement or ""):
        if heading and _is_dropped(heading, r):
            dropped.append(heading)
        else:
            kept.append(body)
    return "".join(kept).strip(), dropped


def words(text: str) -> int:
    return len(_WORD.findall(text or ""))


def underspecified(text: str, r: Rules | None = None) -> bool:
    return words(text) < (r or rules()).min_words
