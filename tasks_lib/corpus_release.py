"""A committed corpus: the valid instances of one or more curated seasons in `data/corpus/<name>/`
(`instances.jsonl`, one schema-valid record per line, sorted by instance id, and a dataset card `README.md`
with counts per source, stack domain and tier and the FAIL_TO_PASS / PASS_TO_PASS totals), which
`pbench list/show/evaluate/validate --dataset <name>` accept without curating.

Nothing of an upstream repository but the instance records: their patches are the PRs' own diffs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tasks_lib import paths, schema, season_plan
from tasks_lib.constants import HARNESS_VERSION
from tasks_lib.errors import InputError
from tasks_lib.season import load_season


def corpus_dir(name: str) -> Path:
    return paths.data_dir() / "corpus" / name


def _season_instances(season_name: str) -> list[dict]:
    spec = load_season(season_name)
    rows: list[dict] = []
    for source in spec.sources:
        path = season_plan.source_out_dir(spec, source) / "instances.jsonl"
        if not path.is_file():
            raise InputError(f"--season {season_name}: {path} missing (curate the season first)")
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def build(name: str, seasons: list[str]) -> Path:
    """Write `data/corpus/<name>/` from the seasons' instances; every record is checked against the schema
    (an invalid one stops the build, naming it). An instance id present in two seasons is kept once (the
    later season's record)."""
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"corpus name {name!r}: a plain folder name, e.g. v0.2")
    if not seasons:
        raise InputError("--season: name at least one curated season")
    by_id: dict[str, dict] = {}
    for season in seasons:
        for row in _season_instances(season):
            # The instance's own source record decides what a test file is (its infra patterns too).
            errors = schema.validate_instance(row, _source_or_none(row))
            if errors:
                raise InputError(f"season {season}: {row.get('instance_id')}: {'; '.join(errors[:3])}")
            by_id[row["instance_id"]] = row
    out = corpus_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    rows = [by_id[i] for i in sorted(by_id)]
    tmp = out / "instances.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))
    tmp.replace(out / "instances.jsonl")
    (out / "README.md").write_text(card(name, rows, seasons))
    return out


def _total(rows: list[dict], key: str) -> int:
    return sum(len(r[key]["backend"]) + len(r[key]["frontend"]) for r in rows)


def _source_or_none(row: dict):
    from tasks_lib import corpus
    from tasks_lib.errors import InputError

    try:
        return corpus.source_for(row)
    except InputError:  # no record here: the harness-wide rules
        return None


def _mirror_args(rows: list[dict]) -> str:
    """` --mirror SOURCE=PATH` per source record of the corpus, when it holds more than one."""

    def name(row: dict) -> str:
        source = _source_or_none(row)
        return source.name if source is not None else row["repo"]  # no record here: the repository says which

    names = sorted({name(r) for r in {r["repo"]: r for r in rows}.values()})
    return "".join(f" --mirror {n}=PATH" for n in names) if len(names) > 1 else ""


def card(name: str, rows: list[dict], seasons: list[str]) -> str:
    """The dataset card: what the corpus holds, counted."""
    lines = [
        "---",
        "license: mit",
        "task_categories: [text-generation]",
        f"pretty_name: PrototypeBench corpus {name}",
        "configs:",
        "- config_name: default",
        "  data_files: [{split: test, path: instances.jsonl}]",
        "---",
        f"# PrototypeBench — corpus `{name}`",
        "",
        "Tasks mined from merged pull requests by `pbench curate` (FAIL_TO_PASS / PASS_TO_PASS from executed",
        f"tests, head side run 3×, base side 2×, flaky tests excluded; harness {HARNESS_VERSION}). Seasons: "
        + ", ".join(f"`{s}`" for s in seasons)
        + ".",
        "",
        "```bash",
        f"pbench list --dataset {name}",
        f"pbench validate --dataset {name}{_mirror_args(rows)}      # gold resolves every instance, empty none",
        "```",
        "",
        "Evaluation reads each instance's base commit from a clone of its repository: without network access,"
        " pass a local mirror with `--mirror PATH` (one source) or `--mirror SOURCE=PATH` per source.",
        "",
        "| | count |",
        "|---|---|",
        f"| instances | {len(rows)} |",
        f"| FAIL_TO_PASS tests | {_total(rows, 'fail_to_pass')} |",
        f"| PASS_TO_PASS tests | {_total(rows, 'pass_to_pass')} |",
    ]
    for field, label in (
        ("repo", "source"),
        ("stack_domain", "stack_domain"),
        ("contamination_tier", "tier"),
    ):
        for value, n in sorted(Counter(r[field] for r in rows).items()):
            lines.append(f"| {label} = {value} | {n} |")
    lines.append("")
    lines.append("| source | instances | FAIL_TO_PASS | PASS_TO_PASS |")
    lines.append("|---|---|---|---|")
    for repo in sorted({r["repo"] for r in rows}):
        mine = [r for r in rows if r["repo"] == repo]
        lines.append(
            f"| {repo} | {len(mine)} | {_total(mine, 'fail_to_pass')} | {_total(mine, 'pass_to_pass')} |"
        )
    return "\n".join(lines) + "\n"
