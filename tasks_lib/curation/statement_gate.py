"""The leak gate: a problem statement never hands the agent the answer (pure; rules are data/statement_rules.toml).

Computed from the instance itself, whatever the statement's source. A statement leaks when it
  * names a hidden test: a FAIL_TO_PASS or PASS_TO_PASS function (pytest) or title (Playwright);
  * names a test file the test patch adds or changes (its path, or its file name);
  * quotes a line of the reference or the test patch (an added or removed line, whitespace collapsed, long
    enough to be specific);
  * holds a diff (a hunk header, `diff --git`, `+++ b/` lines).
`tidy` removes what the rendered text does not show (HTML comments: a PR template's instructions); `check`
names what leaked; `clean` drops the markdown sections of a PR description that describe the testing or the
implementation (always for a PR description, `sections.drop = "always"`; on a leak for any statement); `words`
counts what is left, for the underspecified rule, which also refuses a PR title alone (`title_alone`).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.formats.changed_tests import strip_params

_WS = re.compile(r"\s+")
_DIFF = re.compile(r"(?m)^(@@ -\d+(,\d+)? \+\d+(,\d+)? @@|diff --git |\+\+\+ b/|--- a/)")
_HEADING = re.compile(r"(?m)^(#{1,6})\s+(.+?)\s*#*\s*$|^\*\*(.+?)\*\*:?\s*$")
_WORD = re.compile(r"\w+")
# A definition: Python `def` / `class` (indent, name) or a TypeScript export (name).
_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
_TS_EXPORT = re.compile(
    r"^[ \t]*export[ \t]+(?:default[ \t]+)?(?:async[ \t]+)?(?:function\*?|const|let|class)[ \t]+(\w+)"
)
_HUNK = re.compile(r"^@@ [^@]* @@ ?(.*)$")
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


def _patch_files(instance: Mapping) -> set[str]:
    return {p for key in ("patch", "test_patch") for p in _diff_files(instance.get(key) or "")}


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


def sections(text: str) -> list[tuple[int, str, str]]:
    """(level, heading, body) of a markdown text, the body with its heading line: `#` headings by their level, a
    whole-line bold label (`**Changes:**`) below every `#` level (7); the part before the first heading has level
    0 and heading "". A line inside a fenced code block is never a heading (`# run the tests` in a shell block)."""
    out, level, heading, body = [], 0, "", []
    fence = ""
    for line in (text or "").splitlines(keepends=True):
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
        body.append(line)
    out.append((level, heading, "".join(body)))
    return [(lv, h, b) for lv, h, b in out if b.strip()]


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
    dropped (a template's marked so; an empty one not named)."""
    r = r or rules()
    files = tuple(sorted(_patch_files(instance))) if instance is not None else ()
    kept, dropped = [], []
    within: int | None = None  # the level of the dropped section whose subsections follow
    for level, heading, body in sections(statement or ""):
        if within is not None and level > within:
            continue
        within = None
        if heading and _is_dropped(heading, level, r, files):
            dropped.append(heading)
            within = level
        elif _is_template(body):
            if any(line.strip() for line in body.splitlines()[1:]) and heading:
                dropped.append(f"{heading} (template)")
        else:
            kept.append(body)
    return "".join(kept).strip(), dropped


def new_names(instance: Mapping, r: Rules | None = None) -> list[str]:
    """The names the reference patch adds (a `def` or `class` at module or class level, a TypeScript `export`ed
    function, const or class; not one it also removes, i.e. moves or changes) that the test patch's added lines
    use: imported, called (`name(`) or reached as an attribute (`.name`). An agent cannot guess them."""
    r = r or rules()
    added, removed = _definitions(instance.get("patch") or "")
    added -= removed
    tests = "\n".join(
        line[1:]
        for line in (instance.get("test_patch") or "").splitlines()
        if line.startswith("+") and not line.startswith("+++")
    )
    out = []
    for name in sorted(added):
        if len(name) < r.min_name_chars or (name.startswith("__") and name.endswith("__")):
            continue
        word = re.escape(name)
        if re.search(
            rf"(?m)(?<![\w])({word}\s*\(|\.{word}(?![\w])|^\s*(from|import)\b.*(?<![\w]){word}(?![\w]))",
            tests,
        ) or re.search(rf"(?s)import\s*\{{[^}}]*(?<![\w]){word}(?![\w])[^}}]*\}}", tests):
            out.append(name)
    return out


def _definitions(patch: str) -> tuple[set[str], set[str]]:
    """(added, removed) names defined at module or class level on the patch's `+` / `-` lines: a Python `def` at
    indent 0, or indented under a `class` at indent 0 (the enclosing one read from the diff's lines and hunk
    headers; a `def` inside a function is not an interface); a TypeScript export."""
    added: set[str] = set()
    removed: set[str] = set()
    top = ""  # the innermost indent-0 definition seen: "class" or "def" ("" unknown)
    for line in patch.splitlines():
        if line.startswith(("diff --git ", "+++ ", "--- ")):
            top = ""
            continue
        hunk = _HUNK.match(line)
        if hunk:
            context = _PY_DEF.match(hunk.group(1))  # git names the enclosing definition after the `@@`
            top = "" if not context else "class" if context.group(1) else context.group(2)
            continue
        side, text = line[:1], line[1:]
        if side not in "+- ":
            continue
        ts = _TS_EXPORT.match(text)
        py = _PY_DEF.match(text)
        name = ts.group(1) if ts else None
        if py and not py.group(1):
            top, name = py.group(2), py.group(3)
        elif py and len(py.group(1).expandtabs(4)) <= 4 and top != "def":  # a method (or unknown: counted)
            name = py.group(3)
        if name and side == "+":
            added.add(name)
        elif name and side == "-":
            removed.add(name)
    return added, removed


def unstated_names(statement: str, instance: Mapping, r: Rules | None = None) -> list[str]:
    """`new_names` the statement never names: the hidden tests need an interface it does not give."""
    text = statement or ""
    return [n for n in new_names(instance, r) if not re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", text)]


def words(text: str) -> int:
    """Words of the text's prose: heading lines left out (a heading alone specifies nothing)."""
    prose = [line for line in (text or "").splitlines() if not _HEADING.match(line)]
    return len(_WORD.findall("\n".join(prose)))


def underspecified(text: str, r: Rules | None = None) -> bool:
    return words(text) < (r or rules()).min_words
