"""Predictions: what a model answered for each instance, loaded and checked before any container starts.

Accepted inputs (SWE-bench's shapes plus ours):
- JSONL, a JSON list, or a JSON dict keyed by instance id, of `{instance_id, model_name_or_path,
  model_patch}` (in the dict shape `instance_id` may be left out: the key is the id). A `.jsonl`
  file is always read by line, a `.json` file always as one document, anything else as one
  document when it parses as one;
- an entry with `{"format": "files", "files": {path: content or null}}` instead of `model_patch`,
  turned into a diff against the base checkout;
- the specials `gold` (the reference patches) and `empty` (no change), for self-validation.

What fails the load (InputError, exit 2): a file that cannot be read as predictions at all (missing,
not JSON, an entry that is not an object, a field of the wrong type, no patch in an entry), an
unknown or a duplicate instance id. What does not: a patch that is not a valid diff, is binary,
writes outside the repository or edits tests. Those are per-instance verdicts (`patch_invalid`,
`patch_touches_tests`) from `prediction_problems`, so one bad answer never sinks a run. Extra keys
in an entry are ignored; `model_patch: null` (an agent that produced nothing) reads as "".
Instances without a prediction are simply absent from the result. A full predictions file may meet a
selection of the corpus (`--id`, `--domain`, `--tier`): `load_selected` counts the entries of instances
outside the selection, never converts them, and refuses only the ids the corpus does not hold.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from tasks_lib.core.errors import InputError, json_problem
from tasks_lib.formats.patches import PatchProblem, TestFileRules, files_to_diff, patch_bytes, validate_patch

FilesReader = Callable[[str], Callable[[str], str | None]]


class PredictionFormat(StrEnum):
    """Where a prediction's patch came from."""

    DIFF = "diff"
    FILES = "files"
    GOLD = "gold"
    EMPTY = "empty"


SPECIALS = (PredictionFormat.GOLD.value, PredictionFormat.EMPTY.value)


@dataclass(frozen=True)
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str
    source_format: PredictionFormat

    def __post_init__(self) -> None:
        for name in ("instance_id", "model_name_or_path", "model_patch"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(
                    f"Prediction.{name} must be a string, got {type(getattr(self, name)).__name__}"
                )
        if not self.instance_id:
            raise ValueError("Prediction.instance_id must not be empty")
        if not self.model_name_or_path:
            raise ValueError(f"Prediction.model_name_or_path must not be empty ({self.instance_id})")
        try:
            object.__setattr__(self, "source_format", PredictionFormat(self.source_format))
        except ValueError:
            known = ", ".join(f.value for f in PredictionFormat)
            raise ValueError(
                f"Prediction.source_format must be one of {known}, got {self.source_format!r}"
            ) from None

    @property
    def patch_sha256(self) -> str:
        """Content key of the patch (evaluation caches on it, never on a run id)."""
        return hashlib.sha256(patch_bytes(self.model_patch)).hexdigest()

    def to_dict(self) -> dict[str, str]:
        return {
            "instance_id": self.instance_id,
            "model_name_or_path": self.model_name_or_path,
            "model_patch": self.model_patch,
            "source_format": self.source_format.value,
        }


class PredictionsError(InputError):
    """A predictions file that cannot be used, naming the file, the line or entry, and the problem."""

    def __init__(self, path: str, where: str | None, problem: str, *, instance_id: str | None = None):
        self.path, self.where, self.problem = path, where, problem
        location = f"{path}: {where}" if where else path
        super().__init__(f"{location}: {problem}", instance_id=instance_id)


@dataclass(frozen=True)
class _Entry:
    where: str
    data: Any
    key: str | None = None  # the dict key, in the dict-keyed shape


def _json_lines(path: str, text: str) -> list[_Entry]:
    entries = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            entries.append(_Entry(f"line {number}", json.loads(line)))
        except json.JSONDecodeError as exc:
            raise PredictionsError(path, f"line {number}", f"not JSON ({json_problem(exc)})") from None
        except RecursionError:
            raise PredictionsError(path, f"line {number}", "JSON nested too deeply") from None
    return entries


def _read_entries(path: str, text: str) -> list[_Entry]:
    """Entries of a `.jsonl` file by line, of any other file as one JSON document if it is one
    (a list, a dict keyed by id, or a lone prediction object), else by line."""
    stripped = text.strip()
    if not stripped:
        raise PredictionsError(path, None, "is empty: no predictions")
    if path.endswith(".jsonl"):
        return _json_lines(path, text)
    try:
        whole = json.loads(stripped)
    except RecursionError:
        raise PredictionsError(path, None, "JSON nested too deeply") from None
    except json.JSONDecodeError:
        if path.endswith(".json"):
            raise PredictionsError(path, None, "is not JSON (name it .jsonl for JSON lines)") from None
        return _json_lines(path, text)
    if isinstance(whole, list):
        return [_Entry(f"entry {i}", item) for i, item in enumerate(whole)]
    if isinstance(whole, dict):
        if isinstance(whole.get("instance_id"), str):
            return [_Entry("the only entry", whole)]
        return [_Entry(f"entry {key!r}", item, key) for key, item in whole.items()]
    raise PredictionsError(
        path, None, f"must hold a JSON list, a JSON object or JSON lines, got {type(whole).__name__}"
    )


def _instance_id(path: str, entry: _Entry) -> str:
    data = entry.data
    value = data.get("instance_id", entry.key)
    if value is None:
        raise PredictionsError(path, entry.where, "missing 'instance_id'")
    if not isinstance(value, str) or not value:
        raise PredictionsError(path, entry.where, f"'instance_id' must be a non-empty string, got {value!r}")
    if entry.key is not None and value != entry.key:
        raise PredictionsError(
            path, entry.where, f"'instance_id' {value!r} differs from its key {entry.key!r}"
        )
    return value


def _files_patch(path: str, entry: _Entry, instance_id: str, files_reader: FilesReader | None) -> str:
    files = entry.data.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in files.items()
    ):
        raise PredictionsError(
            path, entry.where, "'files' must be an object mapping paths to contents (or null to delete)"
        )
    if files_reader is None:
        raise PredictionsError(
            path, entry.where, "a 'files' prediction needs the base checkout, but no files reader was given"
        )
    return files_to_diff(files, files_reader(instance_id))


def _prediction(
    path: str, entry: _Entry, default_model: str | None, files_reader: FilesReader | None
) -> Prediction:
    if not isinstance(entry.data, dict):
        raise PredictionsError(path, entry.where, f"must be a JSON object, got {type(entry.data).__name__}")
    data = entry.data
    instance_id = _instance_id(path, entry)
    model = data.get("model_name_or_path", default_model)
    if model is None:
        raise PredictionsError(path, entry.where, "missing 'model_name_or_path'", instance_id=instance_id)
    if not isinstance(model, str) or not model:
        raise PredictionsError(
            path,
            entry.where,
            f"'model_name_or_path' must be a non-empty string, got {model!r}",
            instance_id=instance_id,
        )
    fmt = data.get("format", PredictionFormat.DIFF.value)
    if fmt == PredictionFormat.FILES.value:
        if "model_patch" in data:
            raise PredictionsError(
                path, entry.where, "has both 'model_patch' and 'files'; give one", instance_id=instance_id
            )
        patch = _files_patch(path, entry, instance_id, files_reader)
        return Prediction(instance_id, model, patch, PredictionFormat.FILES)
    if fmt != PredictionFormat.DIFF.value:
        raise PredictionsError(
            path, entry.where, f"'format' must be 'diff' or 'files', got {fmt!r}", instance_id=instance_id
        )
    if "model_patch" not in data:
        raise PredictionsError(path, entry.where, "missing 'model_patch'", instance_id=instance_id)
    patch = data["model_patch"]
    if patch is None:
        patch = ""
    if not isinstance(patch, str):
        raise PredictionsError(
            path,
            entry.where,
            f"'model_patch' must be a string (a unified diff), got {type(patch).__name__}",
            instance_id=instance_id,
        )
    return Prediction(instance_id, model, patch, PredictionFormat.DIFF)


def _specials(special: str, instance_ids: list[str], gold_patches: dict[str, str] | None) -> list[Prediction]:
    if special == PredictionFormat.EMPTY.value:
        return [Prediction(i, "empty", "", PredictionFormat.EMPTY) for i in instance_ids]
    if gold_patches is None:
        raise PredictionsError("gold", None, "the gold predictions need the instances' reference patches")
    missing = [i for i in instance_ids if i not in gold_patches]
    if missing:
        raise PredictionsError("gold", None, f"no reference patch for {', '.join(missing)}")
    return [Prediction(i, "gold", gold_patches[i], PredictionFormat.GOLD) for i in instance_ids]


def load_predictions(
    path_or_special: str | Path,
    instance_ids: list[str],
    *,
    gold_patches: dict[str, str] | None = None,
    files_reader: FilesReader | None = None,
    default_model: str | None = None,
    require_model: bool = False,
) -> list[Prediction]:
    """Predictions for the given instances, in the order of `instance_ids` (see the module doc for
    shapes and for what fails the load). `files_reader(instance_id)` returns a reader of base
    files for that instance; `default_model` fills a missing `model_name_or_path`, and with
    `require_model` every given `model_name_or_path` must equal it (one run is one model)."""
    predictions, _ = load_selected(
        path_or_special,
        instance_ids,
        gold_patches=gold_patches,
        files_reader=files_reader,
        default_model=default_model,
        require_model=require_model,
    )
    return predictions


def load_selected(
    path_or_special: str | Path,
    instance_ids: list[str],
    others: Iterable[str] = (),
    *,
    gold_patches: dict[str, str] | None = None,
    files_reader: FilesReader | None = None,
    default_model: str | None = None,
    require_model: bool = False,
) -> tuple[list[Prediction], list[str]]:
    """`load_predictions` of a selection of a corpus: `instance_ids` are the selected instances, `others` the
    rest of the corpus. An entry of an instance in `others` is counted, checked as an entry (an object with
    an id, never twice) and left out, never converted (a `files` entry of it needs no checkout); an id in
    neither is refused. Returns the selection's predictions and the ids of the others' entries, in file order."""
    name = str(path_or_special)
    if name in SPECIALS:
        return _specials(name, instance_ids, gold_patches), []
    text = _read_text(name, Path(path_or_special))
    known, outside = set(instance_ids), set(others) - set(instance_ids)
    seen: dict[str, str] = {}
    by_id: dict[str, Prediction] = {}
    left_out: list[str] = []
    for entry in _read_entries(name, text):
        if isinstance(entry.data, dict) and (iid := _instance_id(name, entry)) in outside:
            _first_time(name, entry, iid, seen)
            left_out.append(iid)
            continue
        prediction = _prediction(name, entry, default_model, files_reader)
        iid = prediction.instance_id
        if require_model and default_model is not None and prediction.model_name_or_path != default_model:
            raise PredictionsError(
                name,
                entry.where,
                f"'model_name_or_path' is {prediction.model_name_or_path!r} but --model is {default_model!r} "
                "(one run is one model: pass the same name, or split the file)",
                instance_id=iid,
            )
        if iid not in known:
            where = "the corpus" if outside else "the instances to score"
            raise PredictionsError(
                name, entry.where, f"unknown instance id {iid!r} (not in {where})", instance_id=iid
            )
        _first_time(name, entry, iid, seen)
        by_id[iid] = prediction
    order = {iid: i for i, iid in enumerate(dict.fromkeys(instance_ids))}
    return sorted(by_id.values(), key=lambda p: order[p.instance_id]), left_out


def _read_text(name: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PredictionsError(name, None, "does not exist") from None
    except IsADirectoryError:
        raise PredictionsError(name, None, "is a directory, not a predictions file") from None
    except UnicodeDecodeError as exc:
        raise PredictionsError(name, None, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _first_time(name: str, entry: _Entry, iid: str, seen: dict[str, str]) -> None:
    if iid in seen:
        raise PredictionsError(
            name, entry.where, f"duplicate instance id {iid!r} (first at {seen[iid]})", instance_id=iid
        )
    seen[iid] = entry.where


def prediction_problems(
    predictions: Iterable[Prediction], source_of: Callable[[str], TestFileRules | None]
) -> dict[str, list[PatchProblem]]:
    """Per instance, what is wrong with its patch (instances with a clean patch are left out).
    `source_of(instance_id)` gives the instance's source record (its test-file patterns)."""
    out = {}
    for prediction in predictions:
        problems = validate_patch(prediction.model_patch, source_of(prediction.instance_id))
        if problems:
            out[prediction.instance_id] = problems
    return out
