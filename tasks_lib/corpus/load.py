"""Loading a task corpus: a season folder, a JSONL/JSON/Parquet file, a saved HF dataset, or a Hub id."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError, json_problem
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.sources.record import SourceRecord, available_sources, load_source


def _read_jsonl(path: Path) -> list[dict]:
    return [
        _parse_line(path, n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()
    ]


def _parse_line(path: Path, n: int, line: str) -> dict:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: line {n}: not JSON ({json_problem(exc)})") from None


def load_corpus(spec: str | Path) -> list[TaskInstance]:
    """`spec`: a committed corpus name (`data/corpus/<name>/`), a season name or folder, a .jsonl/.json/.parquet
    file, a `save_to_disk` folder, or `hf:<id>`."""
    spec = str(spec)
    if spec.startswith("hf:"):
        return _from_hub(spec[3:])
    path = _corpus_path(spec)
    if isinstance(path, list):
        return path
    if path.suffix == ".jsonl":
        rows = _read_jsonl(path)
    elif path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {exc.lineno}: not JSON ({json_problem(exc)})") from None
        rows = data if isinstance(data, list) else [data]
    elif path.suffix == ".parquet":
        import pandas as pd

        rows = pd.read_parquet(path).to_dict("records")
    else:
        raise InputError(f"{path}: unknown corpus format (use .jsonl, .json, .parquet or a dataset folder)")
    return _instances(rows, path)


def find_instance(spec: str | Path, instance_id: str) -> TaskInstance | None:
    """One instance of a corpus (None: not in it). Of a JSON Lines corpus only the lines that name the id are
    parsed: a whole corpus is megabytes of patches (v0.2: 9.7 MB, ~0.15 s to parse), which one `pbench
    score` would pay for one record."""
    spec = str(spec)
    path = None if spec.startswith("hf:") else _corpus_path(spec)
    if not isinstance(path, Path) or path.suffix != ".jsonl":
        instances = path if isinstance(path, list) else load_corpus(spec)
        return next((i for i in instances if i.instance_id == instance_id), None)
    needle = json.dumps(instance_id)
    with open(path) as fh:
        for n, line in enumerate(fh, start=1):
            if needle in line:
                row = _parse_line(path, n, line)
                if row.get("instance_id") == instance_id:
                    return _instances([row], path)[0]
    return None


def _corpus_path(spec: str) -> Path | list[TaskInstance]:
    """The file a corpus spec names, or the instances of a saved dataset folder."""
    path = Path(spec)
    if not path.exists() and (paths.data_dir() / "corpus" / spec).is_dir():
        path = paths.data_dir() / "corpus" / spec  # a committed corpus (tasks_lib.curation.release)
    elif not path.exists() and (paths.seasons_dir() / spec).is_dir():
        path = paths.seasons_dir() / spec
    if path.is_dir():
        if (path / "instances.jsonl").exists():
            path = path / "instances.jsonl"
        elif any((path / n).exists() for n in ("dataset_dict.json", "dataset_info.json", "state.json")):
            return _from_disk(path)
        elif (path / "hf").is_dir():
            return _from_disk(path / "hf")
        else:
            raise InputError(f"{spec}: a folder without instances.jsonl or a saved dataset")
    if not path.exists():
        raise InputError(
            f"{spec}: no such corpus (a corpus or season name, a file, a folder, or hf:<dataset id>)"
        )
    return path


def _instances(rows, where) -> list[TaskInstance]:
    """The corpus's records, normalised and checked once, as typed instances."""
    return [TaskInstance.from_record(r, where=str(where)) for r in rows]


def _from_disk(path: Path) -> list[TaskInstance]:
    import datasets

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["test"] if "test" in ds else ds[next(iter(ds))]
    return _instances(ds, path)


def _from_hub(dataset_id: str) -> list[TaskInstance]:
    import datasets

    try:
        ds = datasets.load_dataset(dataset_id, split="test")
    except Exception as exc:
        raise InputError(
            f"hf:{dataset_id}: cannot load from the Hugging Face Hub ({type(exc).__name__}: "
            f"{str(exc)[:200]}). Offline? Download it elsewhere, `save_to_disk`, and pass the folder."
        ) from None
    return _instances(ds, f"hf:{dataset_id}")


def select(
    instances: list[TaskInstance],
    ids: Iterable[str] = (),
    domains: Iterable[str] = (),
    tiers: Iterable[str] = (),
) -> list[TaskInstance]:
    ids, domains, tiers = list(ids), set(domains), set(tiers)
    instances = [TaskInstance.of(i) for i in instances]
    if ids:
        known = {i.instance_id for i in instances}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InputError(f"--id {' '.join(unknown)}: not in the corpus (of {len(known)} instances)")
        instances = [i for i in instances if i.instance_id in set(ids)]
    if domains:
        instances = [i for i in instances if i.stack_domain in domains]
    if tiers:
        instances = [i for i in instances if i.contamination_tier in tiers]
    return instances


def source_for(instance: TaskInstance | dict, override: str | None = None) -> SourceRecord:
    """The source record whose `repo` is the instance's repository (or the one named by --source), with the
    era of the instance's merge date applied: an older-era instance run under an explicit --source gets its
    era's lock files and layout, as it does when the record is found by repository."""
    source = _record_for(instance, override)
    return source.for_era(source.era_for(instance.get("created_at")))


def sources_for(instances: Iterable[TaskInstance], override: str | None = None) -> dict[str, SourceRecord]:
    """`source_for` of every instance, by id: each repository's record read once and each era's record made
    once (a run of v0.3 read every source file per instance: 0.55 s of its plan)."""
    records: dict[str, SourceRecord] = {}
    eras: dict[tuple[str, str | None], SourceRecord] = {}
    out = {}
    for inst in instances:
        if inst.repo not in records:
            records[inst.repo] = _record_for(inst, override)
        source = records[inst.repo]
        era = source.era_for(inst.get("created_at"))
        if (inst.repo, era) not in eras:
            eras[inst.repo, era] = source.for_era(era)
        out[inst.instance_id] = eras[inst.repo, era]
    return out


def _record_for(instance: TaskInstance | dict, override: str | None) -> SourceRecord:
    """The source record of the instance's repository (or the one named by --source), no era applied."""
    if override:
        return load_source(override)
    import tomllib

    from tasks_lib.core import paths

    for name in available_sources():
        # Match on the raw `repo` first: a broken record of another repository must not stop this one.
        try:
            repo = tomllib.loads((paths.sources_dir() / f"{name}.toml").read_text()).get("repo")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
            continue
        if repo == TaskInstance.of(instance).repo:
            return load_source(name)
    raise InputError(
        f"{instance['instance_id']}: no source record in data/sources/ has repo {instance['repo']!r}"
    )


def source_or_none(instance: TaskInstance | dict) -> SourceRecord | None:
    """`source_for`, or None where no record here has the instance's repository (the harness-wide rules
    apply)."""
    try:
        return source_for(instance)
    except InputError:
        return None
