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

import pyarrow as pa

from tasks_lib.core import paths
from tasks_lib.core.constants import HARNESS_VERSION
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import schema
from tasks_lib.corpus.load import source_or_none
from tasks_lib.curation import plan as season_plan
from tasks_lib.curation import repackage
from tasks_lib.curation.season import load_season


def corpus_dir(name: str) -> Path:
    return paths.data_dir() / "corpus" / name


def _season_instances(season_name: str) -> list[dict]:
    spec = load_season(season_name)
    if spec.labels != "pbench":
        # A reproduction under another FAIL_TO_PASS rule answers "do we match a published corpus?"; its
        # instances never mix into a corpus labelled by the project's rule.
        raise InputError(
            f"--season {season_name}: labelled under extraction.labels = {spec.labels!r}, a reproduction's "
            "rule; a corpus takes seasons labelled 'pbench' only"
        )
    rows: list[dict] = []
    for source in spec.sources:
        path = season_plan.source_out_dir(spec, source) / "instances.jsonl"
        if not path.is_file():
            raise InputError(f"--season {season_name}: {path} missing (curate the season first)")
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def _season_rejected(season_name: str) -> list[dict]:
    """The instances a season's packaging refused (its sources' rejected.parquet), with the reasons."""
    import pyarrow.parquet as pq

    spec = load_season(season_name)
    rows: list[dict] = []
    for source in spec.sources:
        path = season_plan.source_out_dir(spec, source) / "rejected.parquet"
        if path.is_file():
            rows += pq.read_table(path).to_pylist()
    return rows


def build(name: str, seasons: list[str], reuse: list[str] | None = None) -> Path:
    """Write `data/corpus/<name>/` from the seasons' instances and, with `reuse`, the instances of committed
    corpora (re-packaged, never extracted again: tasks_lib/curation/repackage.py). Every instance is packaged again
    under today's statement rules (curated statements, the leak gate) and checked against the schema; one the
    gate refuses is left out and listed in `rejected.jsonl` with its reasons. An instance id in two inputs is
    kept once: a season's record over a reused corpus's, a later season's over an earlier one's. A corpus may
    re-package itself (`pbench corpus v0.3 --reuse v0.3`: every input is read before anything is written; its
    previous version is in git). What a reused corpus had left out, and no input brings as an instance, stays
    left out with its reasons (there is no record to package again)."""
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"corpus name {name!r}: a plain folder name, e.g. v0.2")
    if not seasons and not reuse:
        raise InputError("--season: name at least one curated season (or --reuse a corpus)")
    by_id: dict[str, dict] = {}
    carried: dict[str, list[str]] = {}
    for old in reuse or []:
        for row in _corpus_rows(old):
            by_id[row["instance_id"]] = row
        carried.update({r["instance_id"]: list(r["reasons"]) for r in _corpus_rejected(old)})
    for season in seasons:
        for row in _season_instances(season):
            # The instance's own source record decides what a test file is (its infra patterns too).
            errors = schema.validate_instance(row, source_or_none(row))
            if errors:
                raise InputError(f"season {season}: {row.get('instance_id')}: {'; '.join(errors[:3])}")
            by_id[row["instance_id"]] = row
    season_rejected = {r["instance_id"]: r for s in seasons for r in _season_rejected(s)}
    prs = repackage.prs_for(list(by_id.values()))
    results = []
    for iid in sorted(by_id):
        row = by_id[iid]
        source = source_or_none(row)
        source_name = source.name if source is not None else row["repo"].replace("/", "__")
        results.append(repackage.repackage(row, source_name, prs[row["repo"]].get(row["pr_number"])))
    out = corpus_dir(name)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r.record for r in results if r.record is not None]
    _write(out / "instances.jsonl", rows)
    left_out = {r.instance_id: list(r.reasons) for r in results if r.record is None}
    carried.update({iid: list(row["reasons"]) for iid, row in season_rejected.items()})
    for iid, reasons in carried.items():  # refused by a season's or a reused corpus's packaging, in no input
        if iid not in by_id:
            left_out[iid] = reasons
    _write(out / "rejected.jsonl", [{"instance_id": i, "reasons": left_out[i]} for i in sorted(left_out)])
    _write(out / "statements.jsonl", [r.row() for r in results])
    (out / "README.md").write_text(card(name, rows, seasons, results, reuse or [], left_out))
    return out


def _write(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))
    tmp.replace(path)


def _corpus_rows(old: str, file: str = "instances.jsonl") -> list[dict]:
    path = corpus_dir(old) / file
    if not (corpus_dir(old) / "instances.jsonl").is_file():
        raise InputError(f"--reuse {old}: {path} missing (known: {', '.join(_known()) or 'none'})")
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"--reuse {old}: {path}:{n}: not JSON ({exc.msg})") from None
    return rows


def _corpus_rejected(old: str) -> list[dict]:
    """A committed corpus's `rejected.jsonl` rows: instance_id and reasons."""
    rows = _corpus_rows(old, "rejected.jsonl")
    for n, row in enumerate(rows, start=1):
        if not isinstance(row.get("instance_id"), str) or not isinstance(row.get("reasons"), list):
            raise InputError(
                f"--reuse {old}: rejected.jsonl row {n}: needs instance_id and a list of reasons"
            )
    return rows


def _known() -> list[str]:
    root = paths.data_dir() / "corpus"
    return (
        sorted(p.name for p in root.iterdir() if (p / "instances.jsonl").is_file()) if root.is_dir() else []
    )


def _total(rows: list[dict], key: str) -> int:
    return sum(len(r[key]["backend"]) + len(r[key]["frontend"]) for r in rows)


def _mirror_args(rows: list[dict]) -> str:
    """` --mirror SOURCE=PATH` per source record of the corpus, when it holds more than one."""

    def name(row: dict) -> str:
        source = source_or_none(row)
        return source.name if source is not None else row["repo"]  # no record here: the repository says which

    names = sorted({name(r) for r in {r["repo"]: r for r in rows}.values()})
    return "".join(f" --mirror {n}=PATH" for n in names) if len(names) > 1 else ""


def features_yaml() -> list[str]:
    """The card's `dataset_info.features`: the columns of instances.parquet (`INSTANCES_SCHEMA`). Without them
    `datasets.load_dataset` infers the JSON Lines' types, and pyarrow's JSON reader makes `created_at` a naive
    timestamp; with them it is the UTC timestamp it is in every Parquet table. Lists are written `sequence:`,
    which every version of `datasets` reads."""
    from tasks_lib.curation.stages import INSTANCES_SCHEMA

    def lines(field, pad: str) -> list[str]:
        head = f"{pad}- name: {field.name}"
        if pa.types.is_struct(field.type):
            return [head, f"{pad}  struct:", *(x for sub in field.type for x in lines(sub, pad + "  "))]
        if pa.types.is_list(field.type):
            return [head, f"{pad}  sequence: '{field.type.value_type}'"]
        return [head, f"{pad}  dtype: '{field.type}'"]

    return ["dataset_info:", "  features:", *(x for f in INSTANCES_SCHEMA for x in lines(f, "  "))]


def card(
    name: str,
    rows: list[dict],
    seasons: list[str],
    results: list | None = None,
    reuse: list[str] | None = None,
    left_out: dict[str, list[str]] | None = None,
) -> str:
    """The dataset card: what the corpus holds, counted (with `results`, the statements' sources and what the
    leak gate left out)."""
    lines = [
        "---",
        "license: mit",
        "task_categories: [text-generation]",
        f"pretty_name: PrototypeBench corpus {name}",
        "configs:",
        "- config_name: default",
        "  data_files: [{split: test, path: instances.jsonl}]",
        *features_yaml(),
        "---",
        f"# PrototypeBench — corpus `{name}`",
        "",
        "Tasks mined from merged pull requests by `pbench curate` (FAIL_TO_PASS / PASS_TO_PASS from executed",
        f"tests, head side run 3×, base side 2×, flaky tests excluded; harness {HARNESS_VERSION}). Seasons: "
        + (", ".join(f"`{s}`" for s in seasons) or "none")
        + "."
        + (
            " Re-packaged without extracting again (statement rules of today): "
            + ", ".join(
                f"`{c}`" + (" (its own previous version, in git)" if c == name else "") for c in reuse
            )
            + "."
            if reuse
            else ""
        ),
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
    if results is not None:
        lines += _statement_lines(results, left_out)
    return "\n".join(lines) + "\n"


STATEMENT_SOURCES = {
    "issue": "the closing issue(s), title and body",
    "pr_description": "the PR description",
    "pr_description_sections_dropped": "the PR description, testing / implementation sections dropped",
    "curated": "curated (data/statements/)",
    "pr_title": "the PR title",
}


def _statement_lines(results: list, left_out: dict[str, list[str]] | None = None) -> list[str]:
    from tasks_lib.curation import repackage

    kept = repackage.counts(results)
    if left_out is None:
        left_out = {r.instance_id: list(r.reasons) for r in results if r.record is None}
    rejected = Counter(reasons[0].split(":", 1)[0] for reasons in left_out.values())
    lines = [
        "",
        "Problem statements: where each comes from (the leak gate, tasks_lib/curation/statement_gate.py, passed every one;"
        " per instance: `statements.jsonl`).",
        "",
        "| statement source | instances |",
        "|---|---|",
    ]
    lines += [f"| {STATEMENT_SOURCES.get(k, k)} | {n} |" for k, n in sorted(kept.items())]
    if rejected:
        lines += [
            "",
            "Left out (`rejected.jsonl`, with the reasons): "
            + ", ".join(f"{n} {reason}" for reason, n in sorted(rejected.items()))
            + ".",
        ]
    return lines
