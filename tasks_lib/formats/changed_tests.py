"""Which tests a change adds or rewrites, read from the test files' text: pytest ids from Python's AST (a test
whose function's code differs), Playwright tests by their text in a spec (no TypeScript parser here), and a
pytest id without its parametrization. Pure functions; extraction and grading use them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

# pytest node id: the parametrization starts at the first "[" that follows "::<name>".
_PARAMS_RE = re.compile(r"^(.*?::[^\W\d]\w*)\[.*\]$", re.DOTALL)


def _is_test_class(node: ast.ClassDef) -> bool:
    """pytest collects `Test*` classes without an __init__, and unittest.TestCase subclasses."""
    for base in node.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name in ("TestCase", "IsolatedAsyncioTestCase"):
            return True
    if not node.name.startswith("Test"):
        return False
    return not any(
        isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "__init__"
        for item in node.body
    )


def _test_nodes(source: str | None, path: str) -> dict[str, str]:
    """pytest id -> a dump of the test function's AST (no positions, so moving a test changes nothing)."""
    if not source:
        return {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        # A file pytest cannot import yields no tests either; the caller sees none added.
        return {}
    found: dict[str, str] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                found[f"{prefix}::{node.name}"] = ast.dump(node)
            elif isinstance(node, ast.ClassDef) and _is_test_class(node):
                visit(node.body, f"{prefix}::{node.name}")

    visit(tree.body, path)
    return found


def _test_ids(source: str | None, path: str) -> set[str]:
    return set(_test_nodes(source, path))


def added_test_functions(before: str | None, after: str, path: str) -> set[str]:
    """pytest ids (`path::test_fn`, `path::TestClass::test_m`, nested classes too) defined in
    `after` but not in `before` (None: the file is new). A renamed test counts as added. `path`
    is the file's path relative to the pytest root (e.g. inside the backend dir). A file that
    does not parse defines no tests."""
    return _test_ids(after, path) - _test_ids(before, path)


def changed_test_functions(before: str | None, after: str, path: str) -> set[str]:
    """The added tests (`added_test_functions`) and those whose function the change rewrites: its code
    (decorators, signature, body; not its position, comments or blank lines) differs between `before` and
    `after`. A test only moved, or whose file changed elsewhere (imports, fixtures), is not changed."""
    old = _test_nodes(before, path)
    return {tid for tid, dump in _test_nodes(after, path).items() if old.get(tid) != dump}


# The line that closes a test call: closing brackets only (`})`, `});`), not `}) => {` of a signature that
# spans lines (`test("t", async ({\n    page,\n  }) => {`).
_CLOSER = re.compile(r"^\s*[})\]][\s})\];,]*$")


def changed_spec_tests(before: str | None, after: str, tests: Iterable[tuple[str, int]]) -> set[str]:
    """Of `tests` (id, 1-based line of its `test(...)` call in `after`), those the change adds or rewrites: the
    test's text in `after` (from its line down to the first line that closes it at its own indentation, or to
    the next test) does not occur, line for line and indentation aside, in `before` (None: a new file, every
    test is added). A TypeScript/JavaScript spec has no parser here; formatted code closes a test at the
    indentation it opened."""
    lines = after.splitlines()
    starts = sorted({line for _, line in tests})
    old = "\n" + "\n".join(line.strip() for line in (before or "").splitlines()) + "\n"
    out = set()
    for test_id, line in tests:
        if before is None:
            out.add(test_id)
            continue
        if not 1 <= line <= len(lines):
            out.add(test_id)  # the id does not fit the file: nothing says it is unchanged
            continue
        following = [s for s in starts if s > line]
        stop = min(following[0] - 1 if following else len(lines), len(lines))
        indent = len(lines[line - 1]) - len(lines[line - 1].lstrip())
        end = stop
        for i in range(line, stop):  # 0-based index i is line i + 1
            text = lines[i]
            if text.strip() and len(text) - len(text.lstrip()) <= indent and _CLOSER.match(text):
                end = i + 1
                break
        segment = "\n".join(t.strip() for t in lines[line - 1 : end])
        if "\n" + segment + "\n" not in old:
            out.add(test_id)
    return out


_DEF_LINE = re.compile(r"^\+(?!\+)\s*def (test_\w+)\s*\(")
_CLASS_LINE = re.compile(r"^\+\s*class (Test\w+)\s*[\(:]")
_PLUS_FILE = re.compile(r"^\+\+\+ b/(.+?)\s*$")


def def_line_tests(test_patch: str, strip_prefix: str = "") -> set[str]:
    """The published PrototypeBench v0.1 harness's reading of a test patch (its `harness/test_patch_parser.py`),
    for reproducing its fallback: every `+def test_*(` line of a `+++ b/` file as `file::name`, and also as
    `file::Class::name` when a `+class Test*` line opened the class earlier in the same hunk; paths relative to
    the pytest root (`strip_prefix` removed). Compared with run ids exactly, so a parametrized test or one in a
    class opened in another hunk is not found, as it was not there; a rewritten body with its `def` line
    unchanged is not a candidate."""
    out: set[str] = set()
    path: str | None = None
    klass: str | None = None
    for line in (test_patch or "").splitlines():
        if match := _PLUS_FILE.match(line):
            path, klass = match[1], None
            if strip_prefix and path.startswith(strip_prefix):
                path = path[len(strip_prefix) :]
            continue
        if line.startswith("@@"):
            klass = None
            continue
        if path is None:
            continue
        if match := _CLASS_LINE.match(line):
            klass = match[1]
        elif match := _DEF_LINE.match(line):
            out.add(f"{path}::{match[1]}")
            if klass:
                out.add(f"{path}::{klass}::{match[1]}")
    return out


def strip_params(test_id: str) -> str:
    """A pytest id without its parametrization: `f.py::test_x[a-[b]]` -> `f.py::test_x`. The
    bracket part starts at the first "[" right after `::<name>`, so brackets in the path or inside
    the parameters do not confuse it; ids without `::` (Playwright) are returned unchanged."""
    match = _PARAMS_RE.match(test_id)
    return match[1] if match else test_id
