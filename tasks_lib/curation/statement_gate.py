"""The leak gate: a problem statement never hands the agent the answer (pure; rules are data/statement_rules.toml).

Computed from the instance itself, whatever the statement's source. A statement leaks when it
  * names a hidden test: a FAIL_TO_PASS or PASS_TO_PASS function or its `Test*` class (pytest), or title
    (Playwright);
  * names a test file the test patch adds or changes (its path, its file name, its stem, its module path);
  * quotes a line of the reference or the test patch (an added or removed line, whitespace collapsed, long
    enough to be specific);
  * holds a diff (a hunk header, `diff --git`, `+++ b/` lines, a fenced block marked `diff` or `patch`).
`tidy` removes what the rendered text does not show (HTML comments: a PR template's instructions); `check`
names what leaked; `clean` drops the markdown sections of a PR description that describe the testing or the
implementation (always for a PR description, `sections.drop = "always"`; on a leak for any statement); `words`
counts what is left, for the underspecified rule, which also refuses a PR title alone (`title_alone`). The
interface rule (the names the hidden tests use that the reference patch adds) is `curation.interface`.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.formats import patches
from tasks_lib.formats.changed_tests import strip_params

_WS = re.compile(r"\s+")
_DIFF = re.compile(
    r"(?m)^(@@ -\d+(,\d+)? \+\d+(,\d+)? @@|diff --git |\+\+\+ b/|--- a/|\s{0,3}(`{3,}|~{3,})\s*(diff|patch)\b)"
)
_HEADING = re.compile(r"(?m)^(#{1,6})\s+(.+?)\s*#*\s*$|^\*\*(.+?)\*\*:?\s*$")
_WORD = re.compile(r"\w+")
_NOT_PLAIN_HEADING = re.compile(r"[=`:]|\*\*|#\d|\w\(|://")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_SHORTCODE = re.compile(r":[a-z0-9_+-]+:")  # an emoji written as GitHub's shortcode, `:bulb:`
_COMMENT = re.compile(r"<!--.*?(-->|\Z)", re.S)
_TASK = re.compile(r"^\s*([-*+]|\d+[.)])\s+\[[ xX]\]")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_PLACEHOLDER = re.compile(r"^\s*(_[^_]+_|\*[^*]+\*)\s*$")
_LIST = re.compile(r"^([-*+]|\d+[.)])\s+")
_BLANKS = re.compile(r"\n[ \t]*(\n[ \t]*)+\n")


@dataclass(frozen=True)
class Rules:
    min_quote_chars: int = 24
    min_function_chars: int = 8
    min_title_chars: int = 12
    headings: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()  # headings never dropped by name (they state the interface)
    drop_sections: str = "always"  # "always" for a PR description, or "on_leak" only
    min_words: int = 10
    title_alone: bool = True  # a PR title alone is underspecified, however many words
    metadata_lines: re.Pattern | None = None  # whole lines that are metadata, not text (one alternation)
    interface: str = "reject"  # a statement that never names what the hidden tests use: "reject" or "allow"
    min_name_chars: int = 4


@functools.cache
def rules() -> Rules:
    data = tomllib.loads((paths.data_dir() / "statement_rules.toml").read_text())
    return Rules(
        min_quote_chars=int(data["quote"]["min_chars"]),
        min_function_chars=int(data["names"]["min_function_chars"]),
        min_title_chars=int(data["names"]["min_title_chars"]),
        headings=tuple(" ".join(_WORD.findall(h.lower())) for h in data["sections"]["headings"]),
        keep=tuple(" ".join(_WORD.findall(h.lower())) for h in data["sections"].get("keep", [])),
        drop_sections=_choice(data["sections"].get("drop", "always"), ("always", "on_leak"), "sections.drop"),
        min_words=int(data["underspecified"]["min_words"]),
        title_alone=bool(data["underspecified"].get("title_alone", True)),
        metadata_lines=_alternation(data.get("template", {}).get("lines", [])),
        interface=_choice(
            data.get("interface", {}).get("unstated", "reject"), ("reject", "allow"), "interface.unstated"
        ),
        min_name_chars=int(data.get("interface", {}).get("min_name_chars", 4)),
    )


def _alternation(patterns: list[str]) -> re.Pattern | None:
    if not patterns:
        return None
    try:
        return re.compile("|".join(f"(?:{p})" for p in patterns), re.I)
    except re.error as exc:
        raise InputError(
            f"data/statement_rules.toml: template.lines: not a regular expression ({exc})"
        ) from None


def _choice(value: str, choices: tuple[str, ...], key: str) -> str:
    if value not in choices:
        raise InputError(f"data/statement_rules.toml: {key} = {value!r}: one of {', '.join(choices)}")
    return value


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


def tidy(text: str) -> str:
    """The text without what is not the author's words on the task: HTML comments (a PR template's instructions,
    hidden when rendered; an unclosed one to the end), metadata lines (`template.lines`: sign-offs, a bare
    "Closes #12"); line ends made `\\n`, runs of blank lines made one, outer whitespace stripped."""
    text = _COMMENT.sub("", (text or "").replace("\r\n", "\n").replace("\r", "\n"))
    meta = rules().metadata_lines
    lines = [line.rstrip() for line in text.split("\n") if not (meta and meta.fullmatch(_bare(line)))]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _bare(line: str) -> str:
    """A line without its list marker and emphasis, for the metadata patterns (`- **Closes:** #12`)."""
    return _LIST.sub("", line.strip()).replace("*", "").strip()


def same_words(a: str, b: str) -> bool:
    """Whether two texts say the same words (case, emoji and punctuation aside): a PR description that only
    repeats the PR's title."""
    return _WORD.findall((a or "").lower()) == _WORD.findall((b or "").lower())


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _tests(instance: Mapping) -> Iterable[str]:
    for key in ("fail_to_pass", "pass_to_pass"):
        for side in ("backend", "frontend"):
            yield from (instance.get(key) or {}).get(side) or []


def test_names(instance: Mapping, r: Rules) -> set[str]:
    """Function names of the pytest ids and the test classes that hold them (`path::TestX::test_y`: `TestX`, as
    pytest collects classes named `Test*`), titles of the Playwright ids, each long enough to be specific."""
    out = set()
    for test_id in _tests(instance):
        if " › " in test_id:
            title = test_id.split(" › ")[-1].strip()
            if len(title) >= r.min_title_chars:
                out.add(title)
        else:
            parts = strip_params(test_id).split("::")
            names = [parts[-1], *(p for p in parts[1:-1] if p.startswith("Test"))]
            out.update(n for n in names if len(n) >= r.min_function_chars)
    return out


def _diff_files(diff: str) -> set[str]:
    """Every path a diff touches (old and new, deleted files too), read as git writes them: a path with spaces
    whole (`Youtube Analysis.spec.ts`), a quoted one unquoted. A diff the parser refuses falls back to its
    `+++ b/` lines, each to its end."""
    try:
        return set(patches.changed_paths(diff or ""))
    except patches.PatchFormatError:
        return {m.group(1).rstrip() for m in re.finditer(r"(?m)^\+\+\+ b/([^\t\n]+)", diff or "")}


def _patch_files(instance: Mapping) -> set[str]:
    return {p for key in ("patch", "test_patch") for p in _diff_files(instance.get(key) or "")}


def _file_patterns(path: str, r: Rules) -> list[str]:
    """How a statement may name a test file besides its path: its file name (`test_items.py`, not a longer path
    ending so), its path as a module (`tests.unit.test_db`), and its stem when that is as specific as a test
    function name must be (`test_metrics_common`, `login.spec`; also the end of a dotted module path or of the
    path without its extension)."""
    name = path.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    out = [
        rf"(?<![\w/.-]){re.escape(name)}(?![\w])",
        rf"(?<![\w/.-]){re.escape(path.rsplit('.', 1)[0].replace('/', '.'))}(?![\w])",
    ]
    if len(stem) >= r.min_function_chars:
        out.append(rf"(?<![\w-]){re.escape(stem)}(?![\w])")
    return out


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
        if path in text or any(re.search(p, text) for p in _file_patterns(path, r)):
            verdict.findings.append(("file", path))
    for which in ("patch", "test_patch"):
        for line in sorted(_diff_lines(instance.get(which) or "", r)):
            if line in flat:
                verdict.findings.append(("quote", f"{which}: {line[:80]}"))
    if _DIFF.search(text):
        verdict.findings.append(("diff", "a diff hunk or file header"))
    return verdict


def sections(text: str) -> list[tuple[int, str, str]]:
    """(level, heading, body) of a markdown text, the body with its heading line: `#` headings by their level, a
    whole-line bold label (`**Changes:**`) or a plain-text heading (`plain_heading`: a rendered description pasted
    as text) below every `#` level (7); the part before the first heading has level 0 and heading "". A line
    inside a fenced code block is never a heading (`# run the tests` in a shell block)."""
    out, level, heading, body = [], 0, "", []
    fence = ""
    lines = (text or "").splitlines(keepends=True)
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
        elif opened:
            fence = opened.group(1)
        elif match := _HEADING.match(line.rstrip("\n")):
            out.append((level, heading, "".join(body)))
            level = len(match.group(1)) if match.group(1) else 7
            heading, body = (match.group(2) or match.group(3) or "").strip(), []
        elif plain_heading(lines, i):
            out.append((level, heading, "".join(body)))
            level, heading, body = 7, line.strip(), []
        body.append(line)
    out.append((level, heading, "".join(body)))
    return [(lv, h, b) for lv, h, b in out if b.strip()]


def plain_heading(lines: list[str], i: int) -> bool:
    """Whether line `i` is a heading written as plain text (a rendered description pasted back, `Test Coverage`
    above its list): after a blank line (or first), before a blank line or a list item and more text; at most
    six words, no sentence or list punctuation, no code, markup or issue reference, and its words of four
    letters or more mostly capitalised (`jq Filter Validation`, not `Fixes the login bug`)."""
    text = lines[i].strip()
    if not text or _HEADING.match(text) or (i > 0 and lines[i - 1].strip()) or i + 1 >= len(lines):
        return False
    after = lines[i + 1]
    if after.strip() and not _LIST.match(after.strip()):
        return False
    if not any(line.strip() for line in lines[i + 1 :]):
        return False
    if _LIST.match(text) or text[0] in "|>`<![" or text[-1] in ".,;:!?" or _NOT_PLAIN_HEADING.search(text):
        return False
    words = _WORD.findall(text)
    long = [w for w in words if len(w) >= 4 and w.isalpha()]
    if not 1 <= len(words) <= 6 or not long:
        return False
    return sum(w[0].isupper() for w in long) * 3 >= len(long) * 2


def _heading_words(heading: str) -> list[str]:
    return _WORD.findall(_SHORTCODE.sub(" ", heading.lower()))


def _is_dropped(heading: str, level: int, r: Rules, files: tuple[str, ...] = ()) -> bool:
    """A heading that names the testing or the implementation: it holds one of the rules' headings as whole words
    (`🧪 Manual testing results`, `Tests (…)`), unless it is one the rules keep (`Breaking changes`: the
    interface); a level-1 heading (a title, `# Fix custom headers not visible when editing tools`) only when it
    starts with one followed by at most two words. A heading naming a file the instance's patches change is one
    too."""
    words = " ".join(_heading_words(heading))
    if any(path in heading or path.rsplit("/", 1)[-1] in heading for path in files):
        return True
    if any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", words) for k in r.keep):
        return False
    for entry in r.headings:
        if level == 1:
            if words.startswith(entry) and len(words.split()) <= len(entry.split()) + 2:
                return True
        elif re.search(rf"(?<!\w){re.escape(entry)}(?!\w)", words):
            return True
    return False


def _is_template(body: str) -> bool:
    """A section with no line of prose: only its heading, task-list items (`- [x] Bug fix`), rules (`---`) and
    whole-line emphasised placeholders (`_Screenshots, design decisions..._`), as a PR template leaves them."""
    lines = [line for line in body.splitlines() if line.strip()]
    if lines and _HEADING.match(lines[0]):
        lines = lines[1:]
    return all(_TASK.match(line) or _RULE.match(line) or _PLACEHOLDER.match(line) for line in lines)


def clean(statement: str, r: Rules | None = None, instance: Mapping | None = None) -> tuple[str, list[str]]:
    """The statement without its testing / implementation sections (with their subsections; a heading naming a
    file the instance's patches change is one) and the sections a template left without prose, and the headings
    dropped (a template's marked so; an empty one not named). A kept part's last line that only leads in to a
    dropped section (`Changes made:`) goes with it."""
    r = r or rules()
    files = tuple(sorted(_patch_files(instance))) if instance is not None else ()
    kept: list[str] = []
    dropped: list[str] = []
    within: int | None = None  # the level of the dropped section whose subsections follow
    for level, heading, body in sections(statement or ""):
        if within is not None and level > within:
            continue
        within = None
        if heading and _is_dropped(heading, level, r, files):
            dropped.append(heading)
            within = level
            if kept:
                kept[-1] = _without_lead_in(kept[-1])
        elif _is_template(body):
            if any(line.strip() for line in body.splitlines()[1:]) and heading:
                dropped.append(f"{heading} (template)")
        else:
            kept.append(body)
    return "".join(kept).strip(), dropped


def _without_lead_in(body: str) -> str:
    """The text without a last line that only leads in to what followed it: a short line ending with a colon
    (`Changes made:`), not a heading."""
    lines = body.rstrip().splitlines()
    last = lines[-1].strip() if lines else ""
    if last.endswith(":") and len(_WORD.findall(last)) <= 6 and not _HEADING.match(last) and len(lines) > 1:
        return "\n".join(lines[:-1]).rstrip() + "\n\n"
    return body


def words(text: str) -> int:
    """Words of the text's prose: heading lines left out (a heading alone specifies nothing)."""
    prose = [line for line in (text or "").splitlines() if not _HEADING.match(line)]
    return len(_WORD.findall("\n".join(prose)))


def underspecified(text: str, r: Rules | None = None) -> bool:
    return words(text) < (r or rules()).min_words
