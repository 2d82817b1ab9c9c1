"""Pure functions over unified diffs: split, inspect, validate, and build them from whole files.

A diff is cut into per-file blocks at their headers and every block keeps its original text
byte-for-byte (extended header lines, modes, renames, binary markers): re-rendering through a
parser loses lines `git apply` needs. `unidiff` is the second opinion on whether a diff parses.
Paths are read the way `git apply -p1` reads them (first component stripped, C-quoted names
unquoted), because that is where a patch would land in the checkout.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from tasks_lib.core.constants import Side, Status
from tasks_lib.protocol import globs

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_BINARY_FILES_RE = re.compile(r"^Binary files (.+) and (.+) differ$")
_MODE_LINE_RE = re.compile(r"^(?:old mode|new mode|new file mode|deleted file mode) ([0-7]{6})$")
_INDEX_MODE_RE = re.compile(r"^index [0-9a-fA-F]+\.\.[0-9a-fA-F]+ ([0-7]{6})$")
_DEV_NULL = "/dev/null"
SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_C_NAMES = {code: name for name, code in _C_ESCAPES.items() if name not in '"\\'}
# Longest header of two unquoted names worth searching for the split between them (git paths are at most
# PATH_MAX bytes); past it the search would go quadratic on a runaway line.
_MAX_GIT_HEADER = 2 * 4096 + 5


class TestFileRules(Protocol):
    """What diff handling needs from a source record (SourceRecord satisfies it)."""

    def is_test_file(self, path: str) -> bool: ...
    def is_test_infra(self, path: str) -> bool: ...
    def side_of(self, path: str) -> Side | None: ...


class PatchFormatError(ValueError):
    """A text that cannot be read as a unified diff (the message says where and why)."""


@dataclass(frozen=True)
class FileDiff:
    """One file's block of a diff: its original text and what its header says.

    `old_path` is None for a created file and `new_path` None for a deleted one.
    """

    text: str
    old_path: str | None
    new_path: str | None
    header: tuple[str, ...]
    modes: tuple[str, ...]
    hunks: int
    binary: bool

    def __post_init__(self) -> None:
        if self.old_path is None and self.new_path is None:
            raise PatchFormatError(f"file diff names no path: {self.text[:80]!r}")

    @property
    def paths(self) -> list[str]:
        """Old and new path (once when equal); a rename yields both."""
        return list(dict.fromkeys(p for p in (self.old_path, self.new_path) if p is not None))

    @property
    def path(self) -> str:
        """The path the block leaves behind (the old one for a deletion)."""
        return self.new_path if self.new_path is not None else self.old_path  # type: ignore[return-value]


@dataclass(frozen=True)
class PatchSplit:
    """A PR diff cut into the solution (`patch`) and the hidden tests (`test_patch`, per side)."""

    patch: str
    test_patch: str
    test_patch_backend: str
    test_patch_frontend: str

    def __post_init__(self) -> None:
        for name in ("patch", "test_patch", "test_patch_backend", "test_patch_frontend"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"PatchSplit.{name} must be a string")


_PROBLEM_STATUSES = (Status.PATCH_INVALID, Status.PATCH_TOUCHES_TESTS)


@dataclass(frozen=True)
class PatchProblem:
    """Why a patch is refused before any container starts. `path` is the offending file, if any."""

    status: Status
    message: str
    path: str | None = None

    def __post_init__(self) -> None:
        if self.status not in _PROBLEM_STATUSES:
            raise ValueError(f"PatchProblem.status must be one of {[str(s) for s in _PROBLEM_STATUSES]}")
        if not self.message:
            raise ValueError("PatchProblem.message must not be empty")
        # Messages quote paths and lines of untrusted text, which may hold surrogate escapes: keep them
        # writable to a trace file, a Parquet column and a terminal.
        object.__setattr__(self, "message", self.message.encode("utf-8", "backslashreplace").decode())


# ---------------------------------------------------------------------------------------------
# Reading diffs


def _lines(text: str) -> list[str]:
    """Lines with their endings, split on "\\n" only (file content may hold "\\r", "\\f", ...)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _unquote(name: str) -> str:
    """Undo git's C-style quoting of a path ("a/\\303\\274.txt" -> a/ü.txt); plain names pass."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body, out, i = name[1:-1], bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            try:
                out += c.encode("utf-8", errors="surrogateescape")
            except UnicodeEncodeError:
                raise PatchFormatError(f"quoted path {name!r} holds a character that is no text") from None
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise PatchFormatError(f"bad escape in quoted path {name!r}")
    return out.decode("utf-8", errors="surrogateescape")


def _quote(path: str) -> str:
    """Quote a path the way git does when it holds control characters, quotes or non-ASCII."""
    if not any(c in '"\\' or ord(c) < 0x20 or ord(c) >= 0x7F for c in path):
        return path
    out = []
    for byte in path.encode("utf-8", errors="surrogateescape"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            named = _C_NAMES.get(byte)
            out.append("\\" + named if named else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def patch_bytes(diff: str) -> bytes:
    """The bytes of a patch as it was read: undecodable bytes come back from their surrogate escapes.
    A lone surrogate that stands for no byte (a JSON "\\ud800" escape, which `validate_patch` refuses)
    is kept as its UTF-8 form, so even such a patch has a content key and a trace."""
    try:
        return diff.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return diff.encode("utf-8", errors="surrogatepass")


def _strip_p1(name: str) -> str:
    """What `git apply -p1` makes of a header path. Absolute names stay absolute so they can be refused."""
    if name.startswith("/") or "/" not in name:
        return name
    return name.split("/", 1)[1]


def _header_name(rest: str) -> str | None:
    """Path from the tail of a `---`/`+++` line: quoted or up to a tab (timestamps, git's space marker)."""
    rest = rest.rstrip("\r\n")
    if rest.startswith('"'):
        i = 1
        while i < len(rest) and rest[i] != '"':
            i += 2 if rest[i] == "\\" else 1
        name = _unquote(rest[: i + 1])
    else:
        name = rest.split("\t", 1)[0]
    return None if name == _DEV_NULL else _strip_p1(name)


def _git_header_paths(rest: str) -> tuple[str | None, str | None]:
    """Paths of `diff --git A B`; only trusted when nothing else in the block names the files."""
    rest = rest.rstrip("\r\n")
    if rest.startswith('"'):
        end = rest.find('" ', 1)
        if end == -1:
            return None, None
        first, second = rest[: end + 1], rest[end + 2 :]
        return _strip_p1(_unquote(first)), _strip_p1(_unquote(second))
    # Unquoted names may contain spaces: pick the split where both halves name the same file.
    if len(rest) <= _MAX_GIT_HEADER:
        for i, char in enumerate(rest):
            if char == " ":
                first, second = rest[:i], rest[i + 1 :]
                if _strip_p1(first) == _strip_p1(_unquote(second)):
                    return _strip_p1(first), _strip_p1(_unquote(second))
    if " b/" in rest:
        first, second = rest.split(" b/", 1)
        return _strip_p1(first), second
    return None, None


def _chunks(diff: str) -> list[list[str]]:
    """Cut a diff into per-file line lists. Hunk line counts are honoured, so a removed line that
    reads "--- x" inside a hunk never starts a new file. Text before the first file (a commit
    message, mail headers) belongs to no file and is dropped."""
    lines = _lines(diff)
    chunks: list[list[str]] = []
    cur: list[str] | None = None
    seen_minus = False
    old_left = new_left = 0
    for i, line in enumerate(lines):
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == " " or line in ("\n", "\r\n"):
                old_left, new_left = old_left - 1, new_left - 1
            elif tag == "-":
                old_left -= 1
            elif tag == "+":
                new_left -= 1
            elif tag != "\\":
                raise PatchFormatError(f"line {i + 1}: hunk ends early, expected more hunk lines: {line!r}")
            if old_left < 0 or new_left < 0:
                raise PatchFormatError(f"line {i + 1}: hunk has more lines than its header announces")
            cur.append(line)  # type: ignore[union-attr]
            continue
        if line.startswith("diff --git "):
            cur, seen_minus = [line], False
            chunks.append(cur)
            continue
        next_is_plus = i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        if line.startswith("--- ") and next_is_plus and (cur is None or seen_minus):
            cur, seen_minus = [line], True
            chunks.append(cur)
            continue
        if cur is None:
            continue
        if line.startswith("--- ") and next_is_plus:
            seen_minus = True
        elif line.startswith("@@"):
            match = _HUNK_RE.match(line)
            if not match:
                raise PatchFormatError(f"line {i + 1}: malformed hunk header {line.rstrip()!r}")
            if not seen_minus:
                raise PatchFormatError(f"line {i + 1}: hunk without a ---/+++ file header")
            old_left = int(match[2]) if match[2] is not None else 1
            new_left = int(match[4]) if match[4] is not None else 1
        cur.append(line)
    if old_left > 0 or new_left > 0:
        raise PatchFormatError(
            f"diff ends inside a hunk ({old_left} old and {new_left} new lines missing); truncated?"
        )
    return chunks


def _file_diff(chunk: list[str]) -> FileDiff:
    old: str | None = None
    new: str | None = None
    old_known = new_known = False
    git_old = git_new = bin_old = bin_new = None
    created = deleted = binary = False
    modes: list[str] = []
    header: list[str] = []
    hunks = 0
    in_header = True
    for raw in chunk:
        line = raw.rstrip("\r\n")
        if line.startswith("@@"):
            hunks += 1
            in_header = False
            continue
        if not in_header:
            continue
        header.append(line)
        if line.startswith("diff --git "):
            git_old, git_new = _git_header_paths(line[len("diff --git ") :])
        elif line.startswith(("rename from ", "copy from ")):
            old, old_known = _unquote(line.split(" ", 2)[2]), True
        elif line.startswith(("rename to ", "copy to ")):
            new, new_known = _unquote(line.split(" ", 2)[2]), True
        elif line.startswith("--- ") and not old_known:
            old, old_known = _header_name(line[4:]), True
        elif line.startswith("+++ ") and not new_known:
            new, new_known = _header_name(line[4:]), True
        elif line.startswith("GIT binary patch"):
            binary = True
            in_header = False  # what follows is base85 data, not header lines
        elif match := _BINARY_FILES_RE.match(line):
            binary = True
            bin_old, bin_new = _header_name(match[1]), _header_name(match[2])
        if line.startswith("new file mode"):
            created = True
        elif line.startswith("deleted file mode"):
            deleted = True
        if match := _MODE_LINE_RE.match(line) or _INDEX_MODE_RE.match(line):
            modes.append(match[1])
    if not old_known:
        old = bin_old if bin_old is not None else git_old
    if not new_known:
        new = bin_new if bin_new is not None else git_new
    if created:
        old = None
    if deleted:
        new = None
    return FileDiff(
        text="".join(chunk),
        old_path=old,
        new_path=new,
        header=tuple(header),
        modes=tuple(dict.fromkeys(modes)),
        hunks=hunks,
        binary=binary,
    )


def file_diffs(diff: str) -> list[FileDiff]:
    """The per-file blocks of a diff, in order. Raises PatchFormatError on a malformed diff."""
    return [_file_diff(chunk) for chunk in _chunks(diff)]


def changed_paths(diff: str) -> list[str]:
    """Every path a diff touches, in order, without duplicates: old and new (renames count both),
    never /dev/null."""
    return list(dict.fromkeys(p for fd in file_diffs(diff) for p in fd.paths))


def _join(blocks: Iterable[FileDiff]) -> str:
    texts = [fd.text for fd in blocks]
    # Only the diff's very last block can lack a final newline; never glue it to the next header.
    return "".join(t if t.endswith("\n") or i == len(texts) - 1 else t + "\n" for i, t in enumerate(texts))


def split_patch(diff: str, source: TestFileRules) -> PatchSplit:
    """Cut a PR diff into `patch` (non-test files) and `test_patch` (files `source.is_test_file`
    claims), and the test patch into backend and frontend by `source.side_of`. A block that
    touches a test path on either side of a rename is a test block. A test file outside both
    dirs (a root conftest.py) goes with the backend, whose runner is the one that reads it."""
    code, tests, backend, frontend = [], [], [], []
    for fd in file_diffs(diff):
        if not any(source.is_test_file(p) for p in fd.paths):
            code.append(fd)
            continue
        tests.append(fd)
        (frontend if source.side_of(fd.path) == Side.FRONTEND else backend).append(fd)
    return PatchSplit(_join(code), _join(tests), _join(backend), _join(frontend))


def lock_files_touched(diff: str, files: Iterable[str]) -> list[str]:
    """The changed paths that are lock (or manifest) files; `files` holds paths or globs."""
    patterns = tuple(files)
    return [p for p in changed_paths(diff) if globs.match_any(p, patterns)]


# ---------------------------------------------------------------------------------------------
# Building diffs from whole files (the `files` prediction shape)


def _hunk_text(old: str, new: str) -> str:
    out = []
    for line in list(difflib.unified_diff(_lines(old), _lines(new), n=3))[2:]:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def files_to_diff(files: dict[str, str | None], read_base: Callable[[str], str | None]) -> str:
    """Turn `{path: full new content}` (None: delete) into a git diff against the base, which
    `read_base(path)` reads (None: no such file). Unchanged files yield nothing. Unsafe paths are
    never read, only written as new files, so `validate_patch` refuses them; deleting a file the
    base lacks yields a deletion that will not apply (a per-instance failure, not a crash)."""
    out = []
    for path in sorted(files):
        content = files[path]
        old = None if path_problems(path) else read_base(path)
        a, b = _quote("a/" + path), _quote("b/" + path)
        if content is None:
            out.append(f"diff --git {a} {b}\ndeleted file mode 100644\n")
            if old:
                out.append(f"--- {a}\n+++ /dev/null\n" + _hunk_text(old, ""))
        elif old is None:
            out.append(f"diff --git {a} {b}\nnew file mode 100644\n")
            if content:
                out.append(f"--- /dev/null\n+++ {b}\n" + _hunk_text("", content))
        elif old != content:
            out.append(f"diff --git {a} {b}\n--- {a}\n+++ {b}\n" + _hunk_text(old, content))
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Validation of untrusted patches


def path_problems(path: str) -> list[str]:
    """Why a path must not be written by a patch (empty list: it is a plain repository path)."""
    problems = []
    if not path:
        return ["empty path"]
    if any(ord(c) < 0x20 or c == "\x7f" for c in path):
        problems.append("control character in path")
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        problems.append("absolute path")
    parts = path.split("/")
    if ".." in parts:
        problems.append("'..' path segment")
    normal = posixpath.normpath(path.lstrip("/"))
    if normal == ".." or normal.startswith("../"):
        problems.append("path escapes the repository")
    elif normal in ("", "."):
        problems.append("path names the repository root, not a file")
    if any(part.lower() == ".git" for part in normal.split("/")):
        problems.append("path into .git/")
    return problems


def _invalid(message: str, path: str | None = None) -> PatchProblem:
    return PatchProblem(Status.PATCH_INVALID, message, path)


def validate_patch(diff: str, source: TestFileRules | None = None) -> list[PatchProblem]:
    """Everything wrong with an untrusted patch, before any container starts (empty: fine).

    `patch_invalid`: unparsable text, a lone surrogate (no bytes to apply), binary hunks, unsafe
    paths (absolute, `..`, escaping the repo, `.git/`), symlinks and submodules.
    `patch_touches_tests`: a path `source.is_test_file` claims (tests and test infrastructure);
    skipped when `source` is None. The empty string is the valid empty patch; text of only
    whitespace is not a patch.
    """
    if diff == "":
        return []
    if not diff.strip():
        return [_invalid("patch is not empty but holds only whitespace")]
    try:
        diff.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        # A lone surrogate (a JSON "\ud800" escape) stands for no byte: there is nothing to hand to git.
        return [_invalid(f"not text: character {exc.start} is a lone surrogate {diff[exc.start]!r}")]
    try:
        blocks = file_diffs(diff)
    except PatchFormatError as exc:
        return [_invalid(f"malformed diff: {exc}")]
    if not blocks:
        return [_invalid("not a unified diff: no 'diff --git' or '---'/'+++' file headers found")]
    problems = _unidiff_problems(diff)
    for fd in blocks:
        if fd.binary:
            problems.append(_invalid(f"{fd.path}: binary patch (binary files are not accepted)", fd.path))
        if SYMLINK_MODE in fd.modes:
            problems.append(_invalid(f"{fd.path}: symlink (mode 120000) is not accepted", fd.path))
        if GITLINK_MODE in fd.modes:
            problems.append(_invalid(f"{fd.path}: submodule (mode 160000) is not accepted", fd.path))
        for path in fd.paths:
            problems.extend(_invalid(f"{path!r}: {problem}", path) for problem in path_problems(path))
    if source is not None:
        for path in dict.fromkeys(p for fd in blocks for p in fd.paths):
            if source.is_test_infra(path):
                kind = "test infrastructure"
            elif source.is_test_file(path):
                kind = "a test file"
            else:
                continue
            problems.append(
                PatchProblem(
                    Status.PATCH_TOUCHES_TESTS,
                    f"{path}: is {kind}; tests are restored to base and the hidden tests applied",
                    path,
                )
            )
    return problems


def _unidiff_problems(diff: str) -> list[PatchProblem]:
    try:
        PatchSet(diff)
    except UnidiffParseError as exc:
        return [_invalid(f"malformed diff: {exc}")]
    return []


def problems_status(problems: Iterable[PatchProblem]) -> Status | None:
    """The verdict a list of problems gives: `patch_invalid` wins over `patch_touches_tests`."""
    statuses = {p.status for p in problems}
    for status in _PROBLEM_STATUSES:
        if status in statuses:
            return status
    return None
