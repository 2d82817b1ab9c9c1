"""SWE-bench interchange: a corpus as SWE-bench's flat records, and flat records read back with sides apart.

SWE-bench's fields, as its datasets define them: `instance_id`, `repo`, `base_commit`, `patch`, `test_patch`,
`problem_statement`, `hints_text`, `created_at`, `version`, `environment_setup_commit`, and `FAIL_TO_PASS` /
`PASS_TO_PASS` as JSON-encoded lists of strings. PrototypeBench's backend (pytest) tests are those lists; the
frontend (Playwright) tests are kept apart, in `FAIL_TO_PASS_FRONTEND` / `PASS_TO_PASS_FRONTEND` (same encoding),
so a SWE-bench tool reading the standard fields sees pytest ids only. PrototypeBench's own fields ride along
(`stack_domain`, `contamination_tier`, `environment` as a JSON string, ...).

An instance without a pytest FAIL_TO_PASS test (a frontend-only one) would export `FAIL_TO_PASS = "[]"`, and
SWE-bench's grading counts an empty FAIL_TO_PASS as all passed: any patch that keeps PASS_TO_PASS would be
RESOLVED_FULL. Such instances are not in the flat export unless asked for (`gradable`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from tasks_lib.corpus.instance import EXTRA_FIELDS, FRONTEND_FIELDS, SWEBENCH_FIELDS, TaskInstance  # noqa: F401

# SWE-bench's flat fields and ours beside them (FRONTEND_FIELDS, EXTRA_FIELDS) are defined with the export itself,
# TaskInstance.to_swebench, and named here too.


def to_swebench(record: Mapping) -> dict:
    """One corpus record as a flat SWE-bench record (`TaskInstance.to_swebench`)."""
    return TaskInstance.of(record).to_swebench()


def gradable(instances: Iterable[Mapping]) -> tuple[list[Mapping], list[Mapping]]:
    """(instances SWE-bench's grading can judge: a pytest FAIL_TO_PASS test at least, the others): the others'
    flat records would be free wins."""
    kept, left = [], []
    for instance in instances:
        (kept if TaskInstance.of(instance).tests("backend")[0] else left).append(instance)
    return kept, left


def write(instances: Iterable[Mapping], out: Path) -> Path:
    """The corpus as flat SWE-bench records: `.jsonl` or `.parquet` by `out`'s suffix, or a `datasets`
    folder (`save_to_disk`, split `test`) otherwise."""
    rows = [to_swebench(i) for i in instances]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix == ".jsonl":
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        tmp.replace(out)
        return out
    if out.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows, schema=schema()), tmp)
        tmp.replace(out)
        return out
    import datasets

    feats = features()
    # No row (a season without a valid instance): the columns all the same, and one shard, since `datasets`
    # cannot load a split saved in none.
    table = datasets.Dataset.from_dict({name: [r[name] for r in rows] for name in feats}, features=feats)
    datasets.DatasetDict({"test": table}).save_to_disk(str(out), num_shards=None if rows else {"test": 1})
    return out


def columns() -> tuple[str, ...]:
    return (*SWEBENCH_FIELDS, *FRONTEND_FIELDS, *EXTRA_FIELDS, "environment")


def schema():
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in columns()])


def features():
    import datasets

    return datasets.Features({name: datasets.Value("string") for name in columns()})
