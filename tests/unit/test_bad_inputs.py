"""Bad inputs end in a named refusal, never a traceback and never a lost answer (reliability campaign).

Property tests (hypothesis) over the untrusted text an agent or an evaluator hands us: diffs
(`validate_patch`, `file_diffs`), predictions files (`load_predictions`, `pbench evaluate`) and
patch files (`pbench score`). At the library level a bad input is a list of `PatchProblem`s or a
typed error naming the file and what is wrong; at the CLI it is exit 2 with a message naming the
input. Source, season and instance records: test_bad_inputs_records.py. No Docker; examples are
derandomized so CI sees the same ones every run.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tasks_lib.core.constants import Status
from tasks_lib.formats.patches import (
    PatchFormatError,
    PatchProblem,
    changed_paths,
    file_diffs,
    files_to_diff,
    patch_bytes,
    problems_status,
    validate_patch,
)
from tasks_lib.judge import reporting
from tasks_lib.judge.evaluation import Verdict, score_instance
from tasks_lib.judge.predictions import Prediction, PredictionsError, load_predictions, prediction_problems
from tasks_lib.sources.record import load_source

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
IID = "fastapi__full-stack-fastapi-template-1396"
IDS = ["acme__app-1", "acme__app-2", "acme__app-3"]
GOOD = "diff --git a/backend/app/x.py b/backend/app/x.py\n--- a/backend/app/x.py\n+++ b/backend/app/x.py\n"
GOOD += "@@ -1 +1 @@\n-a\n+b\n"
PROBLEM_STATUSES = (Status.PATCH_INVALID, Status.PATCH_TOUCHES_TESTS)


def fast(examples: int) -> settings:
    """`examples` cases, no deadline (the first call pays for imports), no example database in the
    tree, and the same cases on every run so a CI failure reproduces."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def as_text(data: bytes) -> str:
    """Bytes as the harness reads an untrusted file: undecodable bytes become surrogate escapes."""
    return data.decode("utf-8", errors="surrogateescape")


@pytest.fixture(scope="module")
def demo():
    return load_source("demo")


# --------------------------------------------------------------------------- strategies

# Lone surrogates that stand for no byte (a JSON "\ud800" escape); \udc80-\udcff are escaped bytes.
LONE_SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udc7f", "\udfff"])
ANY_CHARS = st.characters(exclude_categories=())  # surrogates included
RAW_TEXT = st.one_of(st.text(ANY_CHARS), st.binary().map(as_text))
FRAGMENTS = [
    "diff --git a/x b/x\n",
    "diff --git a/x y b/x y\n",
    'diff --git "a/\\303\\274" "b/\\303\\274"\n',
    'diff --git "a/\\q" b/x\n',
    "--- a/x\n",
    "+++ b/x\n",
    '--- "a/\\377\\"x"\n',
    "--- /dev/null\n",
    "+++ /dev/null\n",
    "+++ b/../../x\n",
    "--- a//etc/passwd\n",
    "@@ -1 +1 @@\n",
    "@@ -1,2 +1,3 @@\n",
    "@@ -0,0 +1 @@\n",
    "@@ -1,99999999999 +1 @@\n",
    "@@ garbage\n",
    "-a\n",
    "+b\n",
    " c\n",
    "\n",
    "\r\n",
    "\r",
    "\\ No newline at end of file\n",
    "new file mode 100644\n",
    "new file mode 120000\n",
    "deleted file mode 100644\n",
    "old mode 100644\n",
    "new mode 160000\n",
    "index 1234567..89abcde 100644\n",
    "similarity index 90%\n",
    "rename from ../x\n",
    "rename to /etc/x\n",
    "copy from .git/config\n",
    "GIT binary patch\nliteral 0\nHcmV?d00001\n\n",
    "Binary files a/x and b/x differ\n",
    "[/red]",
    "\udcff",
    "\t",
]
DIFFISH = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), RAW_TEXT.map(lambda s: s[:6]), LONE_SURROGATES), max_size=25
).map("".join)
ANY_TEXT = st.one_of(RAW_TEXT, DIFFISH)

SEGMENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789_- ü\udcff", min_size=1, max_size=8)
SAFE_PATH = st.lists(SEGMENT, min_size=1, max_size=3).map(lambda parts: "/".join(parts) + ".txt")
PLAIN_PATH = st.lists(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8), min_size=1, max_size=3
).map("/".join)
LINE = st.one_of(
    st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=12),
    st.binary(max_size=12).map(lambda b: as_text(b).replace("\n", "")),
)
CONTENT = st.tuples(st.lists(LINE, min_size=1, max_size=6), st.booleans()).map(
    lambda t: "\n".join(t[0]) + ("\n" if t[1] else "")
)
CHANGE = st.tuples(st.none() | CONTENT, st.none() | CONTENT).filter(lambda oc: oc[0] != oc[1])
CHANGES = st.dictionaries(SAFE_PATH, CHANGE, min_size=1, max_size=3)


def build_diff(changes: dict[str, tuple[str | None, str | None]]) -> str:
    """A git diff of `{path: (old content or None, new content or None)}`, as the `files` shape builds it."""
    return files_to_diff({p: new for p, (_, new) in changes.items()}, lambda p: changes[p][0])


def assert_classified(problems: list) -> None:
    """The validator's contract: a list of named problems, each `patch_invalid` or `patch_touches_tests`,
    with a message that can be written to a log, a Parquet column and a terminal."""
    assert isinstance(problems, list)
    for problem in problems:
        assert isinstance(problem, PatchProblem) and problem.status in PROBLEM_STATUSES and problem.message
        problem.message.encode("utf-8")


# --------------------------------------------------------------------------- diffs


@fast(200)
@given(text=ANY_TEXT)
@example(text="diff --git " + " " * 100 + "\n")
@example(text='diff --git "a/\udcff" "b/\udcff"\n')
@example(text='diff --git "a/\ud800" b/x\n--- a/x\n+++ b/x\n')
def test_any_text_gets_a_list_of_problems_never_an_exception(text, demo):
    """Rule: `validate_patch` never raises; what `file_diffs` cannot read (it raises only
    PatchFormatError) and text without file headers are `patch_invalid`."""
    for source in (None, demo):
        assert_classified(validate_patch(text, source))
    problems = validate_patch(text)
    try:
        blocks = file_diffs(text)
    except PatchFormatError:
        assert problems_status(problems) == Status.PATCH_INVALID
        return
    if text and not blocks:
        assert problems_status(problems) == Status.PATCH_INVALID


@fast(80)
@given(changes=CHANGES)
def test_generated_valid_diffs_validate_clean(changes):
    """Rule: a well-formed diff (any names incl. spaces, non-ASCII and undecodable bytes; any content
    incl. CR, form feeds and missing final newlines) has no problems and names exactly its files."""
    diff = build_diff(changes)
    assert validate_patch(diff) == []
    assert changed_paths(diff) == sorted(changes)


@fast(50)
@given(changes=CHANGES)
def test_a_diff_with_crlf_line_endings_gets_a_verdict(changes):
    """Rule: a whole diff converted to CRLF (a Windows editor) is read, never a crash; its paths are
    read without the CR."""
    diff = build_diff(changes).replace("\n", "\r\n")
    problems = validate_patch(diff)
    assert_classified(problems)
    if not problems:
        assert changed_paths(diff) == sorted(changes)


@fast(100)
@given(change=st.tuples(CONTENT, CONTENT).filter(lambda oc: oc[0] != oc[1]), path=SAFE_PATH, data=st.data())
def test_a_diff_cut_inside_a_hunk_is_invalid_and_says_truncated(change, path, data):
    """Rule: a diff cut before the end of a hunk (an agent's output hitting its token limit) is
    `patch_invalid` saying it looks truncated, never applied as far as it goes."""
    diff = build_diff({path: change})
    lines = [line + "\n" for line in diff.split("\n")[:-1]]
    first_hunk = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    body = [i for i in range(first_hunk + 1, len(lines)) if lines[i][:1] in " +-"]
    cut = data.draw(st.sampled_from(body))
    problems = validate_patch("".join(lines[:cut]))
    assert problems_status(problems) == Status.PATCH_INVALID
    assert any("truncated" in p.message for p in problems), problems


@fast(50)
@given(changes=CHANGES, data=st.data())
def test_a_diff_cut_anywhere_gets_a_verdict(changes, data):
    """Rule: a diff cut at any character is read, never a crash."""
    diff = build_diff(changes)
    cut = data.draw(st.integers(0, len(diff)))
    assert_classified(validate_patch(diff[:cut]))


UNSAFE_PATH = st.one_of(
    st.builds(lambda a, b: f"{a}/../../{b}", PLAIN_PATH, PLAIN_PATH),
    st.builds(lambda a: f"../{a}", PLAIN_PATH),
    st.builds(lambda a: f"/{a}", PLAIN_PATH),
    st.builds(lambda a, b: f"{a}/.git/{b}", PLAIN_PATH, PLAIN_PATH),
    st.builds(lambda a: f".GIT/{a}", PLAIN_PATH),
)


@fast(100)
@given(path=UNSAFE_PATH, before=st.none() | st.just({"ok.txt": ("a\n", "b\n")}))
def test_unsafe_paths_are_invalid_and_named(path, before, demo):
    """Rule: a patch that writes outside the repository or into .git/ is `patch_invalid`, and the
    problem names that path, whatever else the patch holds."""
    block = f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"
    diff = (build_diff(before) if before else "") + block
    problems = validate_patch(diff, demo)
    assert problems_status(problems) == Status.PATCH_INVALID
    assert any(p.path == path and repr(path) in p.message for p in problems), problems


def symlink_block(path: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n"
    )


def mode_block(mode: str):
    return lambda path: f"diff --git a/{path} b/{path}\nold mode 100644\nnew mode {mode}\n"


def git_binary_block(path: str) -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..e69de29\nGIT binary patch\n"
        "literal 3\nKcmZ?wWB>pF01p5F\n\nliteral 0\nHcmV?d00001\n\n"
    )


def binary_files_block(path: str) -> str:
    return f"diff --git a/{path} b/{path}\nindex 1111111..2222222 100644\nBinary files a/{path} and b/{path} differ\n"


@fast(100)
@given(
    path=PLAIN_PATH,
    kind=st.sampled_from(
        [
            (symlink_block, "symlink"),
            (mode_block("120000"), "symlink"),
            (mode_block("160000"), "submodule"),
            (git_binary_block, "binary"),
            (binary_files_block, "binary"),
        ]
    ),
    others=st.dictionaries(PLAIN_PATH.map(lambda p: p + ".py"), st.just(("a\n", "b\n")), max_size=2),
    first=st.booleans(),
)
def test_symlink_submodule_and_binary_blocks_are_invalid_and_named(path, kind, others, first):
    """Rule: a symlink, a submodule or a binary hunk anywhere in a patch is `patch_invalid`, naming its file."""
    make, word = kind
    text = build_diff(others) if others else ""
    diff = make(path) + text if first else text + make(path)
    problems = validate_patch(diff)
    assert problems_status(problems) == Status.PATCH_INVALID
    assert any(p.path == path and word in p.message for p in problems), problems


@fast(50)
@given(text=st.text(" \t\r\n\x0b\x0c", min_size=1))
def test_whitespace_only_is_invalid_and_empty_is_the_empty_patch(text):
    """Rule: "" is the valid empty patch; text of only whitespace is not a patch."""
    assert validate_patch("") == []
    problems = validate_patch(text)
    assert problems_status(problems) == Status.PATCH_INVALID
    assert any("whitespace" in p.message for p in problems)


@fast(50)
@given(changes=CHANGES, surrogate=LONE_SURROGATES, data=st.data())
def test_a_lone_surrogate_is_invalid_and_still_has_bytes_and_a_hash(changes, surrogate, data):
    """Rule: a patch holding a character that stands for no byte (a JSON "\\ud800" escape) cannot be
    written for `git apply`: it is `patch_invalid`, and it still has a content key and a trace."""
    diff = build_diff(changes)
    at = data.draw(st.integers(0, len(diff)))
    bad = diff[:at] + surrogate + diff[at:]
    problems = validate_patch(bad)
    assert problems_status(problems) == Status.PATCH_INVALID
    assert_classified(problems)
    assert patch_bytes(bad) and len(Prediction("a", "m", bad, "diff").patch_sha256) == 64


def test_non_utf8_bytes_round_trip_through_patch_bytes():
    """Rule: a patch read with surrogateescape is written back byte-for-byte (engine, traces, hashes)."""
    raw = b"diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-caf\xe9\r\n+caf\xc3\xa9\r\n"
    assert patch_bytes(as_text(raw)) == raw
    assert validate_patch(as_text(raw)) == []


def _huge_valid_diff() -> str:
    added = "".join(f"+line {i} " + "x" * 40 + "\n" for i in range(60_000))
    return f"diff --git a/big.txt b/big.txt\nnew file mode 100644\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,60000 @@\n{added}"


HUGE = [
    ("valid-3mb", _huge_valid_diff, True),
    ("random-bytes-3mb", lambda: as_text(random.Random(0).randbytes(3_000_000)), False),
    ("header-of-spaces-2mb", lambda: "diff --git " + " " * 2_000_000 + "\n", False),
    ("header-of-names-1mb", lambda: "diff --git " + "a/x b/x " * 125_000 + "\n", None),
    ("one-line-3mb", lambda: "x" * 3_000_000, False),
    ("hunk-headers-1mb", lambda: "--- a/x\n+++ b/x\n" + "@@ -1 +1 @@\n" * 80_000, False),
]


@pytest.mark.parametrize(("make", "valid"), [h[1:] for h in HUGE], ids=[h[0] for h in HUGE])
def test_huge_inputs_get_a_verdict_in_seconds(make, valid):
    """Rule: a few megabytes of diff or garbage (a runaway agent) get their verdict in seconds: no
    quadratic scan holds a worker, no recursion limit is hit (`valid` None: any verdict will do)."""
    text = make()
    start = time.monotonic()
    problems = validate_patch(text)
    assert time.monotonic() - start < 10
    assert_classified(problems)
    if valid is not None:
        assert (problems == []) is valid, problems[:3]


# --------------------------------------------------------------------------- predictions

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(ANY_CHARS, max_size=8)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "instance_id": st.one_of(st.sampled_from([*IDS, "nope__x-1", "[/red]", "[bold]x"]), JSON_VALUES),
        "model_name_or_path": st.one_of(st.just("m1"), JSON_VALUES),
        "model_patch": st.one_of(st.just(GOOD), ANY_TEXT, JSON_VALUES),
        "format": st.one_of(st.sampled_from(["diff", "files", "zip"]), JSON_VALUES),
        "files": st.one_of(st.dictionaries(SAFE_PATH, st.none() | CONTENT, max_size=2), JSON_VALUES),
    },
)
ROWS = st.lists(st.one_of(ENTRY, JSON_VALUES), max_size=4)


def _jsonl(rows: list, newline: str = "\n") -> bytes:
    return "".join(json.dumps(r) + newline for r in rows).encode()


PREDICTION_FILES = st.one_of(
    st.tuples(st.sampled_from([".jsonl", ".json", ".txt"]), st.binary(max_size=200)),
    st.tuples(st.sampled_from([".jsonl", ".txt"]), ROWS.map(_jsonl)),
    st.tuples(st.sampled_from([".jsonl", ".txt"]), ROWS.map(lambda rows: _jsonl(rows, "\r\n"))),
    st.tuples(st.sampled_from([".json", ".txt"]), ROWS.map(lambda rows: json.dumps(rows).encode())),
    st.tuples(
        st.sampled_from([".json", ".txt"]),
        st.dictionaries(st.sampled_from([*IDS, "x"]), ENTRY, max_size=3).map(
            lambda d: json.dumps(d).encode()
        ),
    ),
    st.tuples(st.sampled_from([".jsonl", ".json"]), st.sampled_from([b"", b" \n\r\n", b"\xef\xbb\xbf[]"])),
)


def base_files(instance_id: str):
    return {"backend/app/x.py": "a\n"}.get


def load(path: Path) -> list[Prediction]:
    return load_predictions(path, IDS, files_reader=base_files)


@fast(100)
@given(case=PREDICTION_FILES)
@example(case=(".json", b"[" * 100_000))
@example(case=(".jsonl", b'{"a": ' * 50_000))
@example(case=(".txt", b"{" * 100_000 + b"\n"))
def test_any_predictions_file_loads_or_fails_naming_the_file(tmp_path, case):
    """Rule: whatever a predictions file holds, the load returns predictions for known instances (each
    at most once) or raises PredictionsError (an InputError: exit 2) naming the file; nothing else."""
    suffix, data = case
    path = tmp_path / f"preds{suffix}"
    path.write_bytes(data)
    try:
        predictions = load(path)
    except PredictionsError as exc:
        assert exc.path == str(path) and str(path) in str(exc), exc
        return
    ids = [p.instance_id for p in predictions]
    assert set(ids) <= set(IDS) and len(ids) == len(set(ids))
    assert all(isinstance(p.model_patch, str) for p in predictions)


WRONG = {
    "instance_id": JSON_VALUES.filter(lambda v: not isinstance(v, str) or not v),
    "model_name_or_path": JSON_VALUES.filter(lambda v: not isinstance(v, str) or not v),
    "model_patch": JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, str)),
    "format": JSON_VALUES.filter(lambda v: v not in ("diff", "files")),
    "files": JSON_VALUES.filter(
        lambda v: not isinstance(v, dict) or not all(x is None or isinstance(x, str) for x in v.values())
    ),
}


@fast(80)
@given(key=st.sampled_from(sorted(WRONG)), data=st.data(), shape=st.sampled_from(["jsonl", "list", "dict"]))
def test_a_key_of_the_wrong_type_fails_naming_file_entry_and_key(tmp_path, key, data, shape):
    """Rule: `model_patch` a number, `instance_id` a list, ... fail the load with the file, the line or
    entry, and the key named."""
    value = data.draw(WRONG[key], label="value")
    row = {"instance_id": "acme__app-2", "model_name_or_path": "m1", "model_patch": GOOD}
    if key == "files":
        row = {"instance_id": "acme__app-2", "model_name_or_path": "m1", "format": "files"}
    row[key] = value
    rows = [{"instance_id": "acme__app-1", "model_name_or_path": "m1", "model_patch": GOOD}, row]
    path = tmp_path / f"preds-{shape}.json"
    if shape == "jsonl":
        path = path.with_suffix(".jsonl")
        path.write_bytes(_jsonl(rows))
        where = "line 2"
    elif shape == "list":
        path.write_text(json.dumps(rows))
        where = "entry 1"
    else:
        path.write_text(json.dumps({"acme__app-1": rows[0], "acme__app-2": row}))
        where = "entry 'acme__app-2'"
    with pytest.raises(PredictionsError) as info:
        load(path)
    message = str(info.value)
    assert str(path) in message and where in message and f"'{key}'" in message, message


@fast(25)
@given(rows=st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True), data=st.data())
def test_crlf_and_non_utf8_predictions(tmp_path, rows, data):
    """Rule: a CRLF JSONL file loads exactly like its LF twin; a file with a byte that is not UTF-8 fails
    naming the file and the byte offset."""
    entries = [{"instance_id": i, "model_name_or_path": "m1", "model_patch": GOOD} for i in rows]
    lf, crlf = tmp_path / "lf.jsonl", tmp_path / "crlf.jsonl"
    lf.write_bytes(_jsonl(entries))
    crlf.write_bytes(_jsonl(entries, "\r\n"))
    assert load(crlf) == load(lf)
    raw = crlf.read_bytes()
    at = data.draw(st.integers(0, len(raw)))
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        raw[:at] + data.draw(st.sampled_from([b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80"])) + raw[at:]
    )
    with pytest.raises(PredictionsError, match="is not UTF-8 text") as info:
        load(bad)
    assert str(bad) in str(info.value)


def test_a_huge_predictions_file_loads(tmp_path):
    """Rule: a few megabytes of predictions (three 1 MB patches) load whole, byte-for-byte."""
    patch = GOOD + "".join(f"+{i}" + "y" * 50 + "\n" for i in range(20_000))
    entries = [{"instance_id": i, "model_name_or_path": "m1", "model_patch": patch} for i in IDS]
    path = tmp_path / "big.jsonl"
    path.write_bytes(_jsonl(entries))
    assert [p.model_patch for p in load(path)] == [patch] * 3


BAD_PATCHES = ANY_TEXT.filter(lambda t: problems_status(validate_patch(t)) == Status.PATCH_INVALID)


# JSON cannot tell a surrogate pair written as two escapes from the character it encodes.
JSON_SAFE_BAD_PATCHES = BAD_PATCHES.filter(lambda t: json.loads(json.dumps(t)) == t)


@fast(15)
@given(bad=st.dictionaries(st.sampled_from(IDS), JSON_SAFE_BAD_PATCHES, min_size=1, max_size=3))
def test_one_bad_answer_never_sinks_a_run_or_loses_a_result(tmp_path, bad, demo):
    """Rule: predictions with unusable patches (garbage, undecodable bytes, lone surrogates) all load;
    each bad one gets its own `patch_invalid` verdict, a trace holding the agent's bytes, and a row in
    results.parquet; the good ones are untouched."""
    entries = [{"instance_id": i, "model_name_or_path": "m1", "model_patch": bad.get(i, GOOD)} for i in IDS]
    path = tmp_path / "preds.jsonl"
    path.write_bytes(_jsonl(entries))
    predictions = load(path)
    assert [p.model_patch for p in predictions] == [e["model_patch"] for e in entries]
    problems = prediction_problems(predictions, lambda iid: demo)
    assert set(problems) == set(bad)

    rows = []
    for prediction in predictions:
        if prediction.instance_id not in bad:
            continue  # a clean patch goes to Docker: not here
        iid = prediction.instance_id
        instance = {
            "instance_id": iid,
            "repo": demo.repo,
            "stack_domain": "backend_only",
            "contamination_tier": "public",
            "created_at": "2025-03-01T00:00:00Z",
        }
        trace = tmp_path / "run" / "logs" / iid
        verdict = score_instance(instance, prediction, demo, tmp_path / "no-repo", trace)
        assert (
            isinstance(verdict, Verdict) and verdict.status == Status.PATCH_INVALID and not verdict.resolved
        )
        assert (trace / "agent.diff").read_bytes() == patch_bytes(prediction.model_patch)
        assert (trace / "rejected.txt").read_text(encoding="utf-8").strip()
        rows.append(reporting.result_row("r", "m1", date(2025, 1, 1), instance, verdict))
    meta = {"run_id": "r", "model": "m1", "model_cutoff": "2025-01-01"}
    report = reporting.write_run_outputs(tmp_path / "run", rows, [], meta)
    table = pq.read_table(tmp_path / "run" / "results.parquet").to_pylist()
    assert sorted(r["instance_id"] for r in table) == sorted(bad)
    assert report["by_status"] == {"patch_invalid": len(bad)}


# --------------------------------------------------------------------------- the CLI (a subprocess, like test_cli.py)


def _pbench(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args],
        capture_output=True,
        env={**os.environ, "COLUMNS": "400", **env},
        timeout=120,
    )


@pytest.fixture
def cli_env(tmp_path) -> dict:
    """The published instance as season `pub`; outputs and caches under tmp_path."""
    folder = tmp_path / "out" / "seasons" / "pub"
    folder.mkdir(parents=True)
    (folder / "instances.jsonl").write_bytes(FIXTURE.read_bytes())
    return {"PBENCH_OUTPUT_DIR": str(tmp_path / "out"), "PBENCH_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture
def mirror(tmp_path) -> Path:
    """A tiny local repository for `--mirror`: a patch refused before any container never reads it."""
    repo = tmp_path / "mirror"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "base"], cwd=repo, check=True)
    return repo


def refusal(path: Path) -> PredictionsError | None:
    try:
        load_predictions(path, [IID], files_reader=base_files)
    except PredictionsError as exc:
        return exc
    return None


@fast(1)
@given(case=PREDICTION_FILES)
@example(case=(".jsonl", _jsonl([{"instance_id": "[/red]", "model_name_or_path": "m", "model_patch": ""}])))
@example(case=(".json", b"[" * 100_000))
@example(case=(".jsonl", b"\xff\xfe"))
def test_pbench_evaluate_refuses_a_bad_predictions_file_with_exit_2(tmp_path, cli_env, case):
    """Rule: `pbench evaluate` with a predictions file it cannot use exits 2 with a message naming the
    file (and the instance, printed as written, not as Rich markup), before Prefect starts, and never
    prints a traceback."""
    suffix, data = case
    path = tmp_path / f"preds{suffix}"
    path.write_bytes(data)
    exc = refusal(path)
    assume(exc is not None)
    args = ["--predictions", str(path), "--model", "m", "--model-cutoff", "2025-01-01", "--dataset", "pub"]
    res = _pbench("evaluate", *args, env=cli_env)
    output = (res.stdout + res.stderr).decode("utf-8", errors="replace")
    assert res.returncode == 2, output
    assert str(path) in output and "Traceback" not in output, output
    if exc.instance_id and exc.instance_id.isprintable():
        assert f"[{exc.instance_id}]" in output, output


@fast(1)
@given(text=BAD_PATCHES)
@example(text="diff --git a/x b/x\r\n--- a/x\r\n+++ b/x\r\n@@ -1,2 +1 @@\r\n-a\r\n")
@example(text=as_text(b"--- a/\xff[/red]/../x\n+++ b/\xff[/red]/../x\n@@ -1 +1 @@\n-a\n+b\n"))
def test_pbench_score_refuses_a_bad_patch_with_exit_2_and_keeps_its_bytes(tmp_path, cli_env, mirror, text):
    """Rule: `pbench score` with an unusable patch file exits 2 naming `patch_invalid`, never prints a
    traceback, and keeps the agent's bytes exactly (CRLF and undecodable bytes included) in the trace."""
    data = patch_bytes(text)
    assume(problems_status(validate_patch(as_text(data))) == Status.PATCH_INVALID)
    patch = tmp_path / "fix.diff"
    patch.write_bytes(data)
    out = tmp_path / "verdict"
    args = ["--patch", str(patch), "--dataset", "pub", "--mirror", str(mirror), "--out", str(out)]
    res = _pbench("score", IID, *args, env=cli_env)
    output = (res.stdout + res.stderr).decode("utf-8", errors="replace")
    assert res.returncode == 2, output
    assert "patch_invalid" in output and "Traceback" not in output, output
    assert (out / "logs" / "agent.diff").read_bytes() == data
    assert json.loads((out / "verdict.json").read_text())["status"] == "patch_invalid"
