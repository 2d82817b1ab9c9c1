"""Curation stages as plain functions over files in `data/seasons/<season>/` (the flow only wires them).

crawl -> filter -> distribution -> extraction -> packaging -> tiering -> schema validation -> export.
Each stage reads what the previous one wrote, so any stage can be inspected or rerun on its own.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from datetime import UTC, datetime, time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.core.constants import HARNESS_VERSION, ExtractionStatus
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import tiering
from tasks_lib.curation import distribution, filtering, packaging, statements
from tasks_lib.curation.extraction import EXTRACTION_SCHEMA, ExtractionResult
from tasks_lib.curation.season import Season
from tasks_lib.images import build as images
from tasks_lib.sources import gitops, repos
from tasks_lib.sources.crawl.base import (
    TIMESTAMP,
    PullRequest,
    read_prs_parquet,
    to_utc,
    write_prs_parquet,
    write_table_atomic,
)
from tasks_lib.sources.crawl.mirror import resolve_base_commits
from tasks_lib.sources.record import SourceRecord

log = logging.getLogger(__name__)

_TESTS = pa.struct([("backend", pa.list_(pa.string())), ("frontend", pa.list_(pa.string()))])
INSTANCES_SCHEMA = pa.schema(
    [
        ("schema_version", pa.string()),
        ("instance_id", pa.string()),
        ("repo", pa.string()),
        ("pr_number", pa.int64()),
        ("pr_url", pa.string()),
        ("pr_title", pa.string()),
        ("pr_author", pa.string()),
        ("pr_labels", pa.list_(pa.string())),
        ("base_commit", pa.string()),
        ("head_commit", pa.string()),
        ("problem_statement", pa.string()),
        ("hints_text", pa.string()),
        ("patch", pa.string()),
        ("test_patch", pa.string()),
        ("test_patch_backend", pa.string()),
        ("test_patch_frontend", pa.string()),
        ("fail_to_pass", _TESTS),
        ("pass_to_pass", _TESTS),
        ("stack_domain", pa.string()),
        (
            "environment",
            pa.struct(
                [
                    (k, pa.string())
                    for k in (
                        "python_version",
                        "node_version",
                        "uv_lock_sha",
                        "bun_lock_sha",
                        "docker_compose_sha",
                        "backend_lock_sha",
                        "frontend_lock_sha",
                    )
                ]
            ),
        ),
        ("created_at", TIMESTAMP),  # the record's ISO 8601 string as a UTC timestamp, as in every table
        ("contamination_tier", pa.string()),
        ("difficulty", pa.string()),
        ("notes", pa.string()),
    ]
)

REJECTED_SCHEMA = pa.schema(
    [
        ("instance_id", pa.string()),
        ("pr_number", pa.int64()),
        ("source", pa.string()),
        ("reasons", pa.list_(pa.string())),
    ]
)


def _window_bounds(season: Season) -> tuple[datetime | None, datetime | None]:
    since = datetime.combine(season.since, time.min, UTC) if season.since else None
    until = datetime.combine(season.until, time.min, UTC) if season.until else None
    return since, until


def pr_source(source: SourceRecord, method: str | None, prs_file: str | None, mirror: str | None):
    """The PR source for a crawl: an export file, the local mirror's history, or GitHub."""
    from tasks_lib.sources.crawl.export import ExportPRSource

    if prs_file:
        method = method or "export"
    if method is None:
        method = (
            "export"
            if source.clone.generator
            else ("mirror" if (mirror or source.clone.mirror) else "github")
        )
    if method == "export":
        path = prs_file
        if path is None and source.clone.generator == "demo":
            from tasks_lib.sources.demo_repo import demo_prs_path, ensure_demo_repo

            path = str(demo_prs_path(ensure_demo_repo()))
        if path is None:
            raise InputError(
                "--prs-file: an export file is needed for the export crawl (gh pr list --json ...)"
            )
        return ExportPRSource(path, source.name, source.default_branch, repo=source.repo)
    if method == "mirror":
        from tasks_lib.sources.crawl.mirror import MirrorPRSource

        repo = repos.repo_dir(source, mirror)
        return MirrorPRSource(repo, source.name, source.repo, source.default_branch)
    if method == "github":
        from tasks_lib.sources.crawl.github import GitHubPRSource

        return GitHubPRSource(source.repo, source.name)
    raise InputError(f"--crawl: unknown method {method!r} (export, mirror, github)")


def stage_crawl(
    season: Season,
    source: SourceRecord,
    out: Path,
    *,
    method: str | None = None,
    prs_file: str | None = None,
    mirror: str | None = None,
) -> Path:
    since, until = _window_bounds(season)
    prs = list(pr_source(source, method, prs_file, mirror).iter_merged_prs(since, until))
    try:
        repo = repos.repo_dir(source, mirror)
    except InputError as exc:
        # An export can be imported, filtered and tabulated without the repository; extraction cannot.
        log.warning("%s: base commits left unresolved (%s)", source.name, exc)
    else:
        prs = resolve_base_commits(prs, repo)
    return write_prs_parquet(prs, out / "prs.parquet")


def stage_filter(source: SourceRecord, out: Path) -> Path:
    prs = read_prs_parquet(out / "prs.parquet")
    left_out = statements.unspecifiable_for(source.name)  # the curators' reasons stay in their file
    verdicts = filtering.filter_prs(prs, source, filtering.load_filter_rules(source), left_out)
    return filtering.write_filter_parquet(verdicts, out / "filter.parquet")


def stage_distribution(season: Season, source: SourceRecord, out: Path) -> tuple[Path, str, list[str]]:
    prs = read_prs_parquet(out / "prs.parquet")
    verdicts = filtering.read_filter_parquet(out / "filter.parquet")
    report = distribution.build_distribution(
        prs, verdicts, source, season.target_mix or None, season.tolerance
    )
    distribution.write_distribution_parquet(report, out / "distribution.parquet")
    distribution.write_chart(report, out / "distribution.png")
    warnings = distribution.check_distribution(report, season.fail_on_mismatch)
    return out / "distribution.parquet", distribution.to_markdown(report), warnings


def _kept(verdict, waive: tuple[str, ...]) -> bool:
    """Kept by the filter, or refused only for reasons the season waives (its listed PRs alone)."""
    return verdict.kept or bool(waive) and all(r in waive for r in verdict.reasons)


def extraction_candidates(
    source: SourceRecord,
    out: Path,
    order: str = "oldest",
    only: tuple[int, ...] = (),
    waive: tuple[str, ...] = (),
) -> list[PullRequest]:
    """Kept PRs with a domain in the mix, highest priority first; ties by PR number, lowest first ("oldest")
    or highest first ("newest", the season's `extraction.order`). `only` (the season's `extraction.prs`):
    those PRs alone, in its order, with the filter reasons in `waive` not held against them;
    `listed_not_kept` says why the others are not there."""
    prs = {p.number: p for p in read_prs_parquet(out / "prs.parquet")}
    verdicts = filtering.read_filter_parquet(out / "filter.parquet")
    if only:
        kept = {v.number for v in verdicts if _kept(v, waive)}
        chosen = [prs[n] for n in only if n in kept]
    else:
        sign = -1 if order == "newest" else 1
        verdicts = [v for v in verdicts if v.kept]
        chosen = [prs[v.number] for v in sorted(verdicts, key=lambda v: (-v.priority, sign * v.number))]
    return [p for p in chosen if filtering.pr_stack_domain(p, source) is not None]


def listed_not_kept(
    source: SourceRecord, out: Path, only: tuple[int, ...], waive: tuple[str, ...] = ()
) -> dict[int, str]:
    """Each PR of a season's `extraction.prs` that will not be extracted, with the reason: not in the crawl
    (outside the window or the export), the filter's reasons, or a stack domain outside the source's mix."""
    prs = {p.number: p for p in read_prs_parquet(out / "prs.parquet")}
    verdicts = {v.number: v for v in filtering.read_filter_parquet(out / "filter.parquet")}
    why: dict[int, str] = {}
    for n in only:
        v = verdicts.get(n)
        if n not in prs or v is None:
            why[n] = "not in the crawl (outside the season's window or not in the export)"
        elif not _kept(v, waive):
            why[n] = "filtered: " + ", ".join(r for r in v.reasons if r not in waive)
        elif filtering.pr_stack_domain(prs[n], source) is None:
            why[n] = "no stack domain of the source"
    return why


def deps_key(source: SourceRecord, repo: Path, pr: PullRequest) -> str:
    """Lock hashes and backend image recipes (install command, build files) at base and head: with base/head
    shas, what decides an extraction's result. A change of how an image is built re-extracts."""
    base = images.dependency_contents(source, repo, pr.base_commit)
    head = images.dependency_contents(source, repo, pr.head_commit)
    return (
        f"{images.lock_sha(base)}..{images.lock_sha(head)}@{_recipe(source, base)}..{_recipe(source, head)}"
    )


_RECIPES: dict[str, str] = {}


def _recipe(source: SourceRecord, contents) -> str:
    """The backend image recipe of these dependency files (memoised on their bytes: PRs share locks)."""
    import hashlib

    from tasks_lib.core.errors import PbenchError

    h = hashlib.sha256(repr(source).encode())
    for rel, data in sorted(contents.items()):
        h.update(rel.encode() + b"\0" + (data or b"\1"))
    memo = h.hexdigest()
    if memo not in _RECIPES:
        try:
            _RECIPES[memo] = images.backend_env_spec(source, contents).recipe("")[:16]
        except PbenchError as exc:  # e.g. a lock the record's Python cannot satisfy: its own, stable key
            _RECIPES[memo] = "unbuildable:" + type(exc).__name__
    return _RECIPES[memo]


def write_extraction(results: list[ExtractionResult], out: Path) -> Path:
    rows = [r.to_row() for r in sorted(results, key=lambda r: r.number)]
    return write_table_atomic(
        pa.Table.from_pylist(rows, schema=EXTRACTION_SCHEMA), out / "extraction.parquet"
    )


def read_extraction(out: Path) -> list[ExtractionResult]:
    return [ExtractionResult.from_row(r) for r in pq.read_table(out / "extraction.parquet").to_pylist()]


def stage_package(season: Season, source: SourceRecord, out: Path, mirror: str | None = None) -> dict:
    """Packaging, tiering and schema validation: instances.{parquet,jsonl} and rejected.parquet."""
    repo = repos.repo_dir(source, mirror)
    prs = {p.number: p for p in read_prs_parquet(out / "prs.parquet")}
    cutoffs = season.target_cutoffs()
    instances, rejected = [], []
    for ext in read_extraction(out):
        if ext.status != ExtractionStatus.OK:
            continue
        pr = prs[ext.number]
        candidate = packaging.Candidate.of(pr, source, repo, ext)
        tier = tiering.assign_tier(candidate.instance_id, pr.merged_at, cutoffs, season.internal_only)
        instance, problems = packaging.package(
            candidate, ext, tier, commit_exists=lambda sha: gitops.commit_exists(repo, sha)
        )
        if problems:
            rejected.append(
                {
                    "instance_id": candidate.instance_id,
                    "pr_number": pr.number,
                    "source": source.name,
                    "reasons": problems,
                }
            )
        else:
            instances.append(instance.to_record())
    instances.sort(key=lambda i: i["pr_number"])
    write_instances(instances, out)
    write_table_atomic(pa.Table.from_pylist(rejected, schema=REJECTED_SCHEMA), out / "rejected.parquet")
    return {"instances": len(instances), "rejected": len(rejected)}


def write_instances(instances: list[dict], out: Path) -> None:
    """instances.parquet (typed: `created_at` a UTC timestamp) and instances.jsonl (the records as they are:
    `created_at` the ISO 8601 string of the contract)."""
    rows = []
    for inst in instances:
        row = {name: inst.get(name) for name in INSTANCES_SCHEMA.names}
        row["environment"] = {
            k: inst["environment"].get(k) for k in INSTANCES_SCHEMA.field("environment").type.names
        }
        if row["created_at"] is not None:
            row["created_at"] = to_utc(row["created_at"], what=f"{inst.get('instance_id')}: created_at")
        rows.append(row)
    write_table_atomic(pa.Table.from_pylist(rows, schema=INSTANCES_SCHEMA), out / "instances.parquet")
    tmp = out / "instances.jsonl.tmp"
    tmp.write_text("".join(json.dumps(i, ensure_ascii=False, sort_keys=True) + "\n" for i in instances))
    tmp.replace(out / "instances.jsonl")


def export_dataset(season: Season, out: Path) -> Path:
    """A `datasets.load_from_disk`-loadable copy with a dataset card (README.md)."""
    import datasets

    instances = [
        json.loads(line) for line in (out / "instances.jsonl").read_text().splitlines() if line.strip()
    ]
    table = pq.read_table(out / "instances.parquet")
    hf_dir = out / "hf"
    # A season without a valid instance keeps its columns, in one shard: `datasets` cannot load a split saved
    # in none.
    datasets.DatasetDict({"test": datasets.Dataset(table)}).save_to_disk(
        str(hf_dir), num_shards=None if instances else {"test": 1}
    )
    # The same instances as flat SWE-bench records, the card's `swebench` config: those SWE-bench's grading
    # can judge (a pytest FAIL_TO_PASS test; on the others any patch would resolve).
    from tasks_lib.corpus import swebench

    swebench.write(swebench.gradable(instances)[0], hf_dir / "swebench")
    (hf_dir / "README.md").write_text(dataset_card(season, instances))
    return hf_dir


def dataset_card(season: Season, instances: list[dict]) -> str:
    f2p = sum(len(i["fail_to_pass"]["backend"]) + len(i["fail_to_pass"]["frontend"]) for i in instances)
    p2p = sum(len(i["pass_to_pass"]["backend"]) + len(i["pass_to_pass"]["frontend"]) for i in instances)
    domains = Counter(i["stack_domain"] for i in instances)
    tiers = Counter(i["contamination_tier"] for i in instances)
    lines = [
        "---",
        "license: mit",
        "task_categories: [text-generation]",
        f"pretty_name: PrototypeBench season {season.name}",
        "configs:",
        "- config_name: default",
        "  data_files: [{split: test, path: test/*.arrow}]",
        "- config_name: swebench",
        "  data_files: [{split: test, path: swebench/test/*.arrow}]",
        "---",
        f"# PrototypeBench — season `{season.name}`",
        "",
        "Tasks mined from merged pull requests; FAIL_TO_PASS / PASS_TO_PASS come from executed tests "
        f"(harness {HARNESS_VERSION}, head side run {season.head_runs}x, base side {season.base_runs}x; "
        "flaky tests excluded).",
        "",
    ]
    if season.labels != "pbench":
        lines += [
            f"FAIL_TO_PASS here follows the labelling rule `{season.labels}` (tasks_lib/engine/grading.py), "
            "kept only to reproduce a published corpus: not the project's own rule.",
            "",
        ]
    lines += [
        "| | count |",
        "|---|---|",
        f"| instances | {len(instances)} |",
        f"| FAIL_TO_PASS tests | {f2p} |",
        f"| PASS_TO_PASS tests | {p2p} |",
    ]
    lines += [f"| stack_domain = {k} | {v} |" for k, v in sorted(domains.items())]
    lines += [f"| contamination_tier = {k} | {v} |" for k, v in sorted(tiers.items())]
    from tasks_lib.corpus import swebench

    kept, left = swebench.gradable(instances)
    lines += [
        "",
        f"The `swebench` config holds the {len(kept)} instance(s) with a pytest FAIL_TO_PASS test; "
        f"{len(left)} without one (frontend only) are left out of it: SWE-bench's grading counts an empty "
        "FAIL_TO_PASS as passed. They are in the default config, for PrototypeBench's harness.",
        "",
        f"Target models: {', '.join(season.target_models)}. Sources: {', '.join(season.sources)}.",
        "",
    ]
    return "\n".join(lines)


def write_season_meta(season: Season, out: Path, summary: dict) -> None:
    path = out / "season.json"
    history = json.loads(path.read_text()).get("history", []) if path.exists() else []
    history.append({"finished_at": datetime.now(UTC).isoformat(timespec="seconds"), **summary})
    meta = {
        "season": season.name,
        "sources": list(season.sources),
        "target_models": list(season.target_models),
        "harness_version": HARNESS_VERSION,
        "definition": season.raw,
        "latest": summary,
        "history": history,
    }
    path.write_text(json.dumps(meta, indent=2, default=str))
