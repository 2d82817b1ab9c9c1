"""Invariants of prediction loading: every accepted shape gives the same records, a file that
cannot be used fails with file + line/entry + problem, and a bad patch is a per-instance verdict,
never a load failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tasks_lib.core.constants import Status
from tasks_lib.core.errors import InputError
from tasks_lib.formats.patches import problems_status
from tasks_lib.judge.predictions import (
    Prediction,
    PredictionFormat,
    PredictionsError,
    load_predictions,
    load_selected,
    prediction_problems,
)
from tasks_lib.sources.record import load_source

IDS = ["acme__app-1", "acme__app-2", "acme__app-3"]
PATCH = "diff --git a/backend/app/x.py b/backend/app/x.py\n--- a/backend/app/x.py\n+++ b/backend/app/x.py\n"
PATCH += "@@ -1 +1 @@\n-a\n+b\n"


def entry(iid: str, patch: str = PATCH, model: str = "m1") -> dict:
    return {"instance_id": iid, "model_name_or_path": model, "model_patch": patch}


def write_jsonl(tmp_path: Path, rows: list, name: str = "preds.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_json(tmp_path: Path, data, name: str = "preds.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def expected(*iids: str) -> list[Prediction]:
    return [Prediction(i, "m1", PATCH, PredictionFormat.DIFF) for i in iids]


def test_jsonl_list_and_dict_shapes_give_the_same_predictions(tmp_path):
    """Rule: SWE-bench's three shapes (JSONL, list, dict keyed by id) load to the same records."""
    rows = [entry("acme__app-2"), entry("acme__app-1")]
    jsonl = write_jsonl(tmp_path, rows)
    as_list = write_json(tmp_path, rows, "list.json")
    as_dict = write_json(tmp_path, {r["instance_id"]: r for r in rows}, "dict.json")
    keyed_only = write_json(
        tmp_path,
        {r["instance_id"]: {k: v for k, v in r.items() if k != "instance_id"} for r in rows},
        "k.json",
    )
    for path in (jsonl, as_list, as_dict, keyed_only):
        assert load_predictions(str(path), IDS) == expected("acme__app-1", "acme__app-2"), path


def test_a_single_prediction_object_is_one_entry(tmp_path):
    """Rule: a one-line file (which is also one JSON object) is one prediction, not a dict of ids."""
    for name in ("one.jsonl", "one.json", "one.txt"):
        path = write_jsonl(tmp_path, [entry("acme__app-3")], name)
        assert load_predictions(path, IDS) == expected("acme__app-3"), name


def test_jsonl_without_the_extension_is_still_read_by_line(tmp_path):
    """Rule: a file that is not one JSON document is read as JSON lines whatever its name."""
    path = write_jsonl(tmp_path, [entry("acme__app-1"), entry("acme__app-2")], "preds.out")
    assert load_predictions(path, IDS) == expected("acme__app-1", "acme__app-2")


def test_predictions_follow_the_corpus_order_and_absent_instances_are_absent(tmp_path):
    """Rule: output order is the corpus order; an instance without a prediction is simply not there."""
    path = write_jsonl(tmp_path, [entry("acme__app-3"), entry("acme__app-1")])
    assert [p.instance_id for p in load_predictions(path, IDS)] == ["acme__app-1", "acme__app-3"]


def test_extra_keys_are_ignored_and_null_patch_is_empty(tmp_path):
    """Rule: harness-irrelevant keys (cost, trajectory) pass; `model_patch: null` is the empty patch."""
    row = entry("acme__app-1") | {"cost": 1.5, "model_patch": None}
    (prediction,) = load_predictions(write_jsonl(tmp_path, [row]), IDS)
    assert prediction.model_patch == ""


def test_files_format_becomes_a_diff_against_the_base(tmp_path):
    """Rule: a `files` prediction is converted with the instance's base files into a unified diff."""
    base = {"acme__app-1": {"backend/app/x.py": "a\n"}}
    row = {"instance_id": "acme__app-1", "model_name_or_path": "m1", "format": "files"}
    row["files"] = {"backend/app/x.py": "b\n", "backend/app/new.py": "n\n"}
    (prediction,) = load_predictions(
        write_jsonl(tmp_path, [row]), IDS, files_reader=lambda iid: base[iid].get
    )
    assert prediction.source_format == PredictionFormat.FILES
    assert "-a\n+b\n" in prediction.model_patch
    assert "new file mode 100644" in prediction.model_patch


def test_gold_and_empty_specials_cover_every_instance():
    """Rule: `gold` submits each reference patch and `empty` submits "" for every instance."""
    gold = load_predictions("gold", IDS, gold_patches={i: PATCH for i in IDS})
    assert [(p.instance_id, p.model_patch, p.source_format) for p in gold] == [
        (i, PATCH, PredictionFormat.GOLD) for i in IDS
    ]
    empty = load_predictions("empty", IDS)
    assert all(p.model_patch == "" and p.source_format == PredictionFormat.EMPTY for p in empty)
    assert [p.instance_id for p in empty] == IDS


def test_gold_without_reference_patches_is_an_input_error():
    """Rule: `gold` cannot silently score an instance whose reference patch is unknown."""
    with pytest.raises(InputError, match="acme__app-3"):
        load_predictions("gold", IDS, gold_patches={"acme__app-1": PATCH, "acme__app-2": PATCH})
    with pytest.raises(InputError):
        load_predictions("gold", IDS)


@pytest.mark.parametrize(
    ("rows", "where", "needle"),
    [
        ([entry("acme__app-1"), entry("acme__app-9")], "line 2", "unknown instance id 'acme__app-9'"),
        (
            [entry("acme__app-1"), entry("acme__app-1")],
            "line 2",
            "duplicate instance id 'acme__app-1' (first at line 1)",
        ),
        ([{"instance_id": "acme__app-1", "model_name_or_path": "m1"}], "line 1", "missing 'model_patch'"),
        ([{"model_name_or_path": "m1", "model_patch": ""}], "line 1", "missing 'instance_id'"),
        ([{"instance_id": "acme__app-1", "model_patch": ""}], "line 1", "missing 'model_name_or_path'"),
        ([entry("acme__app-1", patch=42)], "line 1", "'model_patch' must be a string"),
        ([entry("acme__app-1", model=["x"])], "line 1", "'model_name_or_path' must be a non-empty string"),
        (
            [{"instance_id": 7, "model_name_or_path": "m", "model_patch": ""}],
            "line 1",
            "'instance_id' must be",
        ),
        ([["acme__app-1", PATCH]], "line 1", "must be a JSON object"),
        ([entry("acme__app-1") | {"format": "zip"}], "line 1", "'format' must be 'diff' or 'files'"),
        (
            [entry("acme__app-1") | {"format": "files", "files": {}}],
            "line 1",
            "both 'model_patch' and 'files'",
        ),
        (
            [{"instance_id": "acme__app-1", "model_name_or_path": "m", "format": "files", "files": ["a"]}],
            "line 1",
            "'files' must be an object",
        ),
        (
            [
                {
                    "instance_id": "acme__app-1",
                    "model_name_or_path": "m",
                    "format": "files",
                    "files": {"a": "b"},
                }
            ],
            "line 1",
            "no files reader",
        ),
    ],
)
def test_unusable_entries_fail_naming_file_line_and_problem(tmp_path, rows, where, needle):
    """Rule: a load error names the file, the line (or entry) and the problem, and is an InputError (exit 2)."""
    path = write_jsonl(tmp_path, rows)
    with pytest.raises(InputError) as info:
        load_predictions(path, IDS)
    message = str(info.value)
    assert str(path) in message and where in message and needle in message, message


def test_not_json_names_the_line(tmp_path):
    """Rule: a JSONL line that is not JSON fails with its line number."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(entry("acme__app-1")) + "\n\n{not json\n")
    with pytest.raises(PredictionsError, match=r"p\.jsonl: line 3: not JSON") as info:
        load_predictions(path, IDS)
    assert info.value.where == "line 3"


def test_list_and_dict_entries_are_named_by_index_and_key(tmp_path):
    """Rule: in a JSON document the location is the list index or the dict key."""
    with pytest.raises(InputError, match=r"entry 1: unknown instance id"):
        load_predictions(write_json(tmp_path, [entry("acme__app-1"), entry("nope__x-1")]), IDS)
    with pytest.raises(InputError, match=r"entry 'acme__app-2': 'instance_id' 'acme__app-1' differs"):
        load_predictions(write_json(tmp_path, {"acme__app-2": entry("acme__app-1")}, "d.json"), IDS)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("   \n", "is empty"),
        ("42", "must hold a JSON list"),
        ('{"a": 1}\n{"b": 2}\n', "is not JSON"),
    ],
)
def test_files_that_are_not_predictions_fail(tmp_path, content, needle):
    """Rule: a missing, empty or non-prediction file is an InputError naming the file."""
    path = tmp_path / "p.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=needle):
        load_predictions(str(path), IDS)


def test_a_bad_patch_is_a_per_instance_verdict_not_a_load_error(tmp_path):
    """Rule: malformed or test-touching diffs load fine and become `patch_invalid` / `patch_touches_tests`."""
    rows = [
        entry("acme__app-1", patch="I changed main.py"),
        entry("acme__app-2", patch=PATCH.replace("backend/app/x.py", "backend/tests/test_x.py")),
        entry("acme__app-3"),
    ]
    predictions = load_predictions(write_jsonl(tmp_path, rows), IDS)
    assert len(predictions) == 3
    demo = load_source("demo")
    problems = prediction_problems(predictions, lambda iid: demo)
    assert problems_status(problems["acme__app-1"]) == Status.PATCH_INVALID
    assert problems_status(problems["acme__app-2"]) == Status.PATCH_TOUCHES_TESTS
    assert "acme__app-3" not in problems


def test_prediction_refuses_bad_values():
    """Rule: a prediction record holds text patches, a non-empty id and model, and a known format."""
    with pytest.raises(TypeError):
        Prediction("a", "m", None, "diff")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Prediction("", "m", "", "diff")
    with pytest.raises(ValueError):
        Prediction("a", "", "", "diff")
    with pytest.raises(ValueError):
        Prediction("a", "m", "", "zip")  # type: ignore[arg-type]
    assert Prediction("a", "m", "", "gold").source_format is PredictionFormat.GOLD  # type: ignore[arg-type]


def test_patch_hash_depends_only_on_the_patch():
    """Rule: the evaluation cache key sees the patch content, not the model name or the format."""
    a = Prediction("a", "m1", PATCH, PredictionFormat.DIFF)
    b = Prediction("a", "m2", PATCH, PredictionFormat.FILES)
    assert a.patch_sha256 == b.patch_sha256
    assert a.patch_sha256 != Prediction("a", "m1", PATCH + " ", PredictionFormat.DIFF).patch_sha256


def test_default_model_fills_a_missing_model_name(tmp_path):
    """Rule: `--model` can name predictions that do not carry `model_name_or_path`."""
    path = write_jsonl(tmp_path, [{"instance_id": "acme__app-1", "model_patch": ""}])
    (prediction,) = load_predictions(path, IDS, default_model="cli-model")
    assert prediction.model_name_or_path == "cli-model"


def test_a_full_file_meets_a_selection_the_others_counted_never_refused(tmp_path):
    """Rule (issue 39, item 2): SWE-bench's habit, a predictions file of the whole corpus and `--instance_ids`
    for a subset. The entries of the corpus's other instances are counted and left out (a `files` entry among
    them needs no checkout: it is never converted); an id the corpus does not hold is still refused, and says
    so; a duplicate is a duplicate wherever it is."""
    files_entry = {"instance_id": "acme__app-3", "model_name_or_path": "m1", "format": "files", "files": {}}
    path = write_jsonl(tmp_path, [entry("acme__app-1"), entry("acme__app-2"), files_entry])
    chosen, others = load_selected(path, ["acme__app-2"], IDS)
    assert chosen == expected("acme__app-2") and others == ["acme__app-1", "acme__app-3"]
    with pytest.raises(
        PredictionsError, match=r"line 1: unknown instance id 'acme__app-1' \(not in the instances"
    ):
        load_predictions(path, ["acme__app-2"])  # no corpus given: the selection is all it knows
    path = write_jsonl(tmp_path, [entry("acme__app-2"), entry("acme__app-9")])
    with pytest.raises(
        PredictionsError, match=r"line 2: unknown instance id 'acme__app-9' \(not in the corpus\)"
    ):
        load_selected(path, ["acme__app-2"], IDS)
    path = write_jsonl(tmp_path, [entry("acme__app-1"), entry("acme__app-1")])
    with pytest.raises(
        PredictionsError, match="line 2: duplicate instance id 'acme__app-1' \\(first at line 1\\)"
    ):
        load_selected(path, ["acme__app-2"], IDS)


def test_a_json_error_says_where_once(tmp_path):
    """Rule (issue 39, item 4): json's own message may end in "at" ("Unterminated string starting at"): the
    column follows it once, never "starting at at column"."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"instance_id": "acme__app-1", "model_patch": "x\n')
    with pytest.raises(PredictionsError) as info:
        load_predictions(path, IDS)
    assert "not JSON (Unterminated string starting at column 47)" in str(info.value), str(info.value)
    path.write_text('{"instance_id" "acme__app-1"}\n')
    with pytest.raises(PredictionsError, match=r"not JSON \(Expecting ':' delimiter at column 16\)"):
        load_predictions(path, IDS)
