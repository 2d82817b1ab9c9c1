"""Corpus loading (issue 4, item 1): one normalised instance shape from every corpus format.

A season folder, JSONL, JSON, Parquet, a `datasets` `save_to_disk` folder, or a Hub id (unreachable here:
a clear, fast failure). Whatever the format, consumers get plain lists and ints, never numpy values.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import load as corpus
from tasks_lib.corpus.instance import TaskInstance

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
PUBLISHED = json.loads(FIXTURE.read_text().splitlines()[0])


def second_instance() -> dict:
    """A fullstack, public instance with parametrized and Playwright ids, and the SAME top-level keys as the
    published one (columnar formats infer their columns; missing keys are a separate test)."""
    inst = copy.deepcopy(PUBLISHED)
    inst.update(
        instance_id="prototypebench__demo-fullstack-7",
        repo="prototypebench/demo-fullstack",
        pr_number=7,
        pr_url="https://example.org/prototypebench/demo-fullstack/pull/7",
        pr_labels=["feature", "frontend"],
        stack_domain="fullstack",
        contamination_tier="public",
        created_at="2025-02-03T04:05:06Z",
        fail_to_pass={
            "backend": ["tests/test_items.py::test_archive[a b-[c]]"],
            "frontend": ["tests/items.spec.ts:42:3 › Items › archive"],
        },
        pass_to_pass={"backend": ["tests/test_items.py::test_list"], "frontend": []},
        test_patch_frontend="diff --git a/frontend/tests/items.spec.ts b/frontend/tests/items.spec.ts\n",
    )
    inst["environment"] = {**PUBLISHED["environment"], "backend_lock_sha": "sha256:" + "0" * 64}
    return inst


SECOND = second_instance()
ROWS = [PUBLISHED, SECOND]


def assert_plain(instances: list[dict]) -> None:
    """Lists are lists, ints are ints: what JSONL gives, whatever the storage format."""
    for inst in instances:
        for key in ("fail_to_pass", "pass_to_pass"):
            assert set(inst[key]) == {"backend", "frontend"}
            for ids in inst[key].values():
                assert type(ids) is list and all(type(t) is str for t in ids)
        assert type(inst["pr_labels"]) is list
        assert type(inst["pr_number"]) is int
        assert type(inst["environment"]) is dict


@pytest.fixture
def reference(tmp_path) -> list[dict]:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS))
    loaded = corpus.load_corpus(path)
    assert_plain(loaded)
    return loaded


def save_dataset_dict(rows: list[dict], folder: Path) -> Path:
    import datasets

    datasets.disable_progress_bars()
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    return folder


# --------------------------------------------------------------------------- formats


def test_jsonl_keeps_the_published_instance_unchanged(reference):
    """Rule: the published v0.1 instance loads unchanged (only its implicit shape is made explicit)."""
    assert reference[0] == PUBLISHED
    assert [i["instance_id"] for i in reference] == [PUBLISHED["instance_id"], SECOND["instance_id"]]


def test_json_list_and_single_object_equal_jsonl(tmp_path, reference):
    """Rule: a JSON list (or one JSON object) gives the same instances as JSONL."""
    (tmp_path / "list.json").write_text(json.dumps(ROWS))
    (tmp_path / "one.json").write_text(json.dumps(PUBLISHED))
    assert corpus.load_corpus(tmp_path / "list.json") == reference
    assert corpus.load_corpus(tmp_path / "one.json") == reference[:1]


@pytest.mark.parametrize("writer", ["pandas", "pyarrow"])
def test_parquet_equals_jsonl_with_plain_lists(tmp_path, reference, writer):
    """Rule: Parquet (pandas- or pyarrow-written) gives the same dicts as JSONL: lists, not numpy arrays."""
    path = tmp_path / "corpus.parquet"
    if writer == "pandas":
        pd.DataFrame(ROWS).to_parquet(path)
    else:
        pq.write_table(pa.Table.from_pylist(ROWS), path)
    loaded = corpus.load_corpus(path)
    assert_plain(loaded)
    assert loaded == reference


def test_saved_dataset_split_folder_equals_jsonl(tmp_path, reference):
    """Rule: a `save_to_disk` Dataset folder gives the same normalised dicts as JSONL."""
    folder = save_dataset_dict(ROWS, tmp_path / "hf")
    loaded = corpus.load_corpus(folder / "test")
    assert_plain(loaded)
    assert loaded == reference


def test_season_folder_with_only_a_saved_dataset_equals_jsonl(tmp_path, reference):
    """Rule: a season folder whose corpus is only the `hf/` export (DatasetDict, split "test") loads."""
    season = tmp_path / "season"
    save_dataset_dict(ROWS, season / "hf")
    loaded = corpus.load_corpus(season)
    assert_plain(loaded)
    assert loaded == reference


def test_dataset_dict_folder_equals_jsonl(tmp_path, reference):
    """Rule: a saved Hugging Face dataset loads; a DatasetDict with split "test" (what curation writes to
    `data/seasons/<s>/hf`) gives the same normalised dicts as JSONL."""
    folder = save_dataset_dict(ROWS, tmp_path / "hf")
    loaded = corpus.load_corpus(folder)
    assert loaded == reference


def test_parquet_nulls_of_optional_fields_are_dropped_like_jsonl(tmp_path):
    """Rule: every format gives the same normalised dict; an optional field absent in one row (null in the
    Parquet column) is absent after loading, never NaN (`inst.get('test_patch_frontend') or ...` must work)."""
    with_optional = dict(SECOND, hints_text="see review", difficulty="easy")
    rows = [PUBLISHED, with_optional]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pd.DataFrame(rows).to_parquet(tmp_path / "c.parquet")
    assert corpus.load_corpus(tmp_path / "c.parquet") == corpus.load_corpus(tmp_path / "c.jsonl")


def test_lowercase_label_fields_as_json_strings_are_decoded(tmp_path):
    """Rule: label lists stored as JSON strings (a flat column) load as the backend list."""
    flat = dict(
        PUBLISHED,
        fail_to_pass=json.dumps(PUBLISHED["fail_to_pass"]["backend"]),
        pass_to_pass=json.dumps(PUBLISHED["pass_to_pass"]["backend"]),
    )
    (tmp_path / "flat.jsonl").write_text(json.dumps(flat) + "\n")
    (loaded,) = corpus.load_corpus(tmp_path / "flat.jsonl")
    assert loaded["fail_to_pass"] == PUBLISHED["fail_to_pass"]
    assert loaded["pass_to_pass"] == PUBLISHED["pass_to_pass"]


def test_flat_swebench_export_keeps_its_labels(tmp_path):
    """Rule: the project's own plain SWE-bench export (FAIL_TO_PASS as a JSON string) loads with its tests;
    losing them would make every instance ungradable ('no tests to grade')."""
    (tmp_path / "swe.jsonl").write_text(json.dumps(TaskInstance.of(PUBLISHED).to_swebench()) + "\n")
    (loaded,) = corpus.load_corpus(tmp_path / "swe.jsonl")
    assert loaded["fail_to_pass"]["backend"] == PUBLISHED["fail_to_pass"]["backend"]
    assert loaded["pass_to_pass"]["backend"] == PUBLISHED["pass_to_pass"]["backend"]


def test_flat_swebench_export_loads(tmp_path):
    """Rule: a flat SWE-bench export is accepted as a corpus file, with ids and patches intact."""
    (tmp_path / "swe.jsonl").write_text(json.dumps(TaskInstance.of(PUBLISHED).to_swebench()) + "\n")
    (loaded,) = corpus.load_corpus(tmp_path / "swe.jsonl")
    assert loaded["instance_id"] == PUBLISHED["instance_id"]
    assert loaded["patch"] == PUBLISHED["patch"]
    assert loaded["base_commit"] == PUBLISHED["base_commit"]
    assert_plain([dict(loaded, pr_number=1)])  # the flat shape has no pr_number


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bad.jsonl", '{"instance_id": "a"}\n{oops\n', "line 2"),
        ("bad.json", "[{", "not JSON"),
        ("corpus.csv", "a,b\n", "unknown corpus format"),
    ],
)
def test_malformed_corpus_file_is_an_input_error(tmp_path, name, content, needle):
    """Rule: a malformed corpus is an InputError naming the file (and line), not a traceback."""
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputError) as exc:
        corpus.load_corpus(path)
    assert needle in str(exc.value) and name in str(exc.value)


def test_missing_corpus_and_empty_folder_are_input_errors(tmp_path, monkeypatch):
    """Rule: a corpus that is neither a file, a folder with a corpus, nor a season is named in the error."""
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path / "data"))
    with pytest.raises(InputError, match="no such corpus"):
        corpus.load_corpus(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="without instances.jsonl"):
        corpus.load_corpus(tmp_path)


def test_season_name_resolves_under_the_data_dir(tmp_path, monkeypatch, reference):
    """Rule: a bare season name means `<seasons dir>/<name>/instances.jsonl`."""
    monkeypatch.setenv("PBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PBENCH_OUTPUT_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    season = paths.seasons_dir() / "s1"
    season.mkdir(parents=True)
    (season / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert corpus.load_corpus("s1") == reference


def test_hub_id_fails_fast_offline_with_a_clear_message(monkeypatch):
    """Rule: the Hub is unreachable here; `hf:<id>` fails with an InputError that says what to do offline,
    and fails fast (no retries against an unreachable network)."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    # Both libraries read these variables once, at import; the module-level flags are what they consult.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    start = time.monotonic()
    with pytest.raises(InputError) as exc:
        corpus.load_corpus("hf:some/dataset")
    assert time.monotonic() - start < 10
    message = str(exc.value)
    assert "hf:some/dataset" in message
    assert "Offline" in message and "save_to_disk" in message


# --------------------------------------------------------------------------- select


def test_select_by_ids_domains_and_tiers(reference):
    """Rule: a run can be restricted by instance ids, stack domains and tiers (filters combine)."""
    pub, demo = PUBLISHED["instance_id"], SECOND["instance_id"]
    assert corpus.select(reference) == reference
    assert [i["instance_id"] for i in corpus.select(reference, ids=[demo])] == [demo]
    assert [i["instance_id"] for i in corpus.select(reference, domains=["backend_only"])] == [pub]
    assert [i["instance_id"] for i in corpus.select(reference, tiers=["public"])] == [demo]
    assert corpus.select(reference, domains=["fullstack"], tiers=["held_out"]) == []
    assert [i["instance_id"] for i in corpus.select(reference, ids=[demo, pub], tiers=["held_out"])] == [pub]


def test_select_keeps_corpus_order(reference):
    """Rule: selection never reorders the corpus (deterministic runs)."""
    ids = [SECOND["instance_id"], PUBLISHED["instance_id"]]
    assert [i["instance_id"] for i in corpus.select(reference, ids=ids)] == ids[::-1]


def test_select_unknown_id_is_an_input_error(reference):
    """Rule: an unknown id is named in an InputError; a typo never silently shrinks a run."""
    with pytest.raises(InputError) as exc:
        corpus.select(reference, ids=[PUBLISHED["instance_id"], "acme__nope-1"])
    assert "acme__nope-1" in str(exc.value)


def test_one_instance_is_found_without_reading_the_others(tmp_path):
    committed = paths.data_dir() / "corpus" / "v0.2" / "instances.jsonl"
    rows = [json.loads(line) for line in committed.read_text().splitlines()[:3]]
    path = tmp_path / "instances.jsonl"
    # The second record names the third's id in its text, and a broken line stands between: neither is read
    # as the third, and the broken line is not parsed at all.
    rows[1]["notes"] = f"see {rows[2]['instance_id']}"
    lines = [json.dumps(rows[0]), json.dumps(rows[1]), "{not json", json.dumps(rows[2])]
    path.write_text("\n".join(lines) + "\n")
    found = corpus.find_instance(path, rows[2]["instance_id"])
    assert found is not None and found.instance_id == rows[2]["instance_id"]
    assert found.patch == rows[2]["patch"]
    assert corpus.find_instance(path, "nobody__nothing-1") is None
    with pytest.raises(InputError, match="line 3: not JSON"):
        corpus.load_corpus(path)  # the whole corpus still refuses the broken line
