"""The interface rule of the leak gate: a statement names what the hidden tests use that the reference patch adds.

An agent cannot guess a name: a function, class, constant or alias the reference patch adds and the hidden tests
import, call or reach as an attribute is the task's interface, and a statement that never gives one is
underspecified (`interface.unstated` in data/statement_rules.toml; applied by `packaging.apply_leak_gate`).
Pure, computed from the instance's two patches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from tasks_lib.curation.statement_gate import Rules, rules

# A definition: Python `def` / `class` (indent, name) or a TypeScript export (name).
_PY_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)")
_TS_EXPORT = re.compile(
    r"^[ \t]*export[ \t]+(?:default[ \t]+)?(?:async[ \t]+)?(?:function\*?|const|let|class)[ \t]+(\w+)"
)
_PY_CONSTANT = re.compile(r"^([A-Z][A-Z0-9_]*)[ \t]*(?::[^=]*)?=(?!=)")
_PY_IMPORT = re.compile(r"^(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]")
_PY_ALIAS = re.compile(r"\bas[ \t]+(\w+)")
_HUNK = re.compile(r"^@@ [^@]* @@ ?(.*)$")


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
        if (
            re.search(
                rf"(?m)((?<![\w]){word}\s*\(|\.{word}(?![\w])|^\s*(from|import)\b.*(?<![\w]){word}(?![\w]))",
                tests,
            )
            or re.search(rf"(?s)import\s*\{{[^}}]*(?<![\w]){word}(?![\w])[^}}]*\}}", tests)
            or re.search(rf"(?m)^\s*from\s+[\w.]+\s+import\s*\([^)]*(?<![\w]){word}(?![\w])[^)]*\)", tests)
        ):
            out.append(name)
    return out


def _definitions(patch: str) -> tuple[set[str], set[str]]:
    """(added, removed) names defined at module or class level on the patch's `+` / `-` lines: a Python `def` at
    indent 0, or indented under a `class` at indent 0 (the enclosing one read from the diff's lines and hunk
    headers; a `def` inside a function is not an interface); in a Python module also an UPPER_CASE constant
    assigned at indent 0 and a name an import binds with `as` (`from m import f as _f`: the tests may reach
    the module's `_f`); a TypeScript export."""
    added: set[str] = set()
    removed: set[str] = set()
    top = ""  # the innermost indent-0 definition seen: "class" or "def" ("" unknown)
    python = False
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            python = line.rstrip().endswith(".py")
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
        names = [name] if name else []
        if python and side in ("+", "-"):
            names += _module_bindings(text)
        for name in names:
            (added if side == "+" else removed if side == "-" else set()).add(name)
    return added, removed


def _module_bindings(line: str) -> list[str]:
    """Names a module-level (indent 0) Python line binds besides a `def` / `class`: an UPPER_CASE constant, and
    the names an import binds with `as`."""
    if match := _PY_CONSTANT.match(line):
        return [match.group(1)]
    if _PY_IMPORT.match(line):
        return _PY_ALIAS.findall(line)
    return []


def unstated_names(statement: str, instance: Mapping, r: Rules | None = None) -> list[str]:
    """`new_names` the statement never names: the hidden tests need an interface it does not give."""
    text = statement or ""
    return [n for n in new_names(instance, r) if not re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", text)]
