"""The curation season flow: wiring of the stages in tasks_lib.curation, with caching and retries.

The expensive stage, FAIL_TO_PASS extraction, is cached per PR on its content (repository, base and head
commits, lock hashes at both, run counts, harness version), not on the flow run: a rerun of the same
season starts no container, and a crash halfway resumes from the PRs that finished.
"""

from __future__ import annotations

import logging
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.futures import as_completed
from prefect.logging import get_run_logger

from flows import artifacts
from flows.runners import task_runner
from tasks_lib import curation, extraction, gitops
from tasks_lib.constants import ExtractionStatus
from tasks_lib.errors import InfraError, InputError
from tasks_lib.season import Season, load_season
from tasks_lib.sources import load_source

STAGES = ("crawl", "filter", "distribution")


def _logger():
    try:
        return get_run_logger()
    except Exception:  # called outside a run (unit tests of the wiring)
        return logging.getLogger("pbench.curation")


@task(retries=2, retry_delay_seconds=5, retry_condition_fn=lambda t, r, s: _is_transient(s))
def crawl(
    season: Season, source_name: str, method: str | None, prs_file: str | None, mirror: str | None, out: str
) -> str:
    source = load_source(source_name)
    return str(
        curation.stage_crawl(season, source, Path(out), method=method, prs_file=prs_file, mirror=mirror)
    )


@task
def filter_stage(source_name: str, out: str) -> str:
    return str(curation.stage_filter(load_source(source_name), Path(out)))


@task
def distribution_stage(season: Season, source_name: str, out: str) -> list[str]:
    path, markdown, warnings = curation.stage_distribution(season, load_source(source_name), Path(out))
    create_markdown_artifact(
        key=f"distribution-{_key(season.name)}",
        markdown=markdown + artifacts.inline_png(Path(out) / "distribution.png", "distribution chart"),
        description=f"Distribution check of season {season.name}",
    )
    return warnings


def _is_transient(state) -> bool:
    try:
        state.result()
    except InfraError:
        return True
    except Exception:
        return False
    return False


class TransientExtractionError(InfraError):
    """An extraction that hit infrastructure trouble: retried by Prefect, never cached."""


# Cached on inputs that decide the result; the log folder and the mirror path do not.
@task(
    cache_policy=(INPUTS + TASK_SOURCE) - "log_dir" - "mirror",
    persist_result=True,
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=lambda t, r, s: _is_transient(s),
    task_run_name="extract #{number}",
)
def extract_pr(
    source_name: str,
    repo_name: str,
    number: int,
    base: str,
    head: str,
    deps_key: str,
    head_runs: int,
    base_runs: int,
    log_dir: str,
    mirror: str | None,
    era: str | None = None,
) -> dict:
    # The PR's era decides lock files, installer and commands (e.g. poetry before uv).
    source = load_source(source_name).for_era(era)
    repo = gitops.repo_dir(source, mirror)
    result = extraction.extract(
        source, repo, number, base, head, Path(log_dir), head_runs=head_runs, base_runs=base_runs
    )
    if result.status in (ExtractionStatus.INFRA_ERROR, ExtractionStatus.TIMEOUT):
        raise TransientExtractionError(f"#{number}: {result.status}: {result.error}", log_path=log_dir)
    return result.to_row()


@task
def package_stage(season: Season, source_name: str, out: str, mirror: str | None) -> dict:
    summary = curation.stage_package(season, load_source(source_name), Path(out), mirror)
    curation.export_dataset(season, Path(out))
    return summary


def _key(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())


@flow(name="curation-season")
def curation_season(
    season: str = "demo",
    sources: list[str] | None = None,
    crawl_method: str | None = None,
    prs_file: str | None = None,
    mirror: str | None = None,
    limit: int | None = None,
    until: str | None = None,
) -> dict:
    """Crawl -> filter -> distribution -> extraction -> packaging/tiering/validation, per source.

    `until="distribution"` stops after the offline stages (no container): a first look at a new export.
    """
    if until not in (None, *STAGES):
        raise InputError(f"--until: one of {', '.join(STAGES)}, got {until!r}")
    logger = _logger()
    spec = load_season(season, sources=sources)
    summaries = {}
    for source_name in spec.sources:
        source = load_source(source_name)
        out = spec.out_dir if len(spec.sources) == 1 else spec.out_dir / source_name
        out.mkdir(parents=True, exist_ok=True)
        crawl(spec, source_name, crawl_method, prs_file, mirror, str(out))
        if until == "crawl":
            summaries[source_name] = {"out": str(out), "stopped_after": until}
            continue
        filter_stage(source_name, str(out))
        if until == "filter":
            summaries[source_name] = {"out": str(out), "stopped_after": until}
            continue
        for warning in distribution_stage(spec, source_name, str(out)):
            logger.warning("distribution: %s", warning)
        if until == "distribution":
            summaries[source_name] = {"out": str(out), "stopped_after": until}
            continue

        repo = gitops.repo_dir(source, mirror)
        candidates = curation.extraction_candidates(source, out)
        if limit:
            candidates = candidates[:limit]
        logger.info("%s: extracting FAIL_TO_PASS for %d PR(s)", source_name, len(candidates))
        futures = {}
        failed = []
        for pr in candidates:
            if not (pr.base_commit and pr.head_commit):
                failed.append(
                    extraction.ExtractionResult(
                        pr.number,
                        ExtractionStatus.INFRA_ERROR,
                        "",
                        pr.merge_commit,
                        error="merge commit not found in the repository",
                    )
                )
                continue
            era = source.era_for(pr.merged_at)
            fut = extract_pr.submit(
                source_name,
                source.repo,
                pr.number,
                pr.base_commit,
                pr.head_commit,
                curation.deps_key(source.for_era(era), repo, pr),
                spec.head_runs,
                spec.base_runs,
                str(out / "logs" / f"pr-{pr.number}"),
                mirror,
                era,
            )
            futures[fut] = pr
        results = list(failed)
        for i, fut in enumerate(as_completed(list(futures)), start=1):
            pr = futures[fut]
            try:
                row = fut.result()
                result = extraction.ExtractionResult.from_row(row)
            except InfraError as exc:
                result = extraction.ExtractionResult(
                    pr.number, ExtractionStatus.INFRA_ERROR, pr.base_commit, pr.head_commit, error=str(exc)
                )
            results.append(result)
            logger.info(
                "[%d/%d] #%d %s: F2P %d, P2P %d, flaky %d (%.0fs)",
                i,
                len(futures),
                pr.number,
                result.status,
                len(result.fail_to_pass),
                len(result.pass_to_pass),
                len(result.flaky_tests),
                result.duration_s,
            )
        curation.write_extraction(results, out)
        summary = package_stage(spec, source_name, str(out), mirror)
        counts = {}
        for r in results:
            counts[str(r.status)] = counts.get(str(r.status), 0) + 1
        summary.update({"extraction": counts, "out": str(out)})
        curation.write_season_meta(spec, out, summary)
        create_table_artifact(
            key=f"extraction-{_key(season)}-{_key(source_name)}",
            table=[
                {
                    "pr": r.number,
                    "status": str(r.status),
                    "f2p": len(r.fail_to_pass),
                    "p2p": len(r.pass_to_pass),
                    "flaky": len(r.flaky_tests),
                    "seconds": r.duration_s,
                }
                for r in sorted(results, key=lambda r: r.number)
            ],
            description=f"FAIL_TO_PASS extraction, season {season}, source {source_name}",
        )
        artifacts.link_outputs(
            f"season-{season}-{source_name}",
            [
                out / n
                for n in (
                    "prs.parquet",
                    "filter.parquet",
                    "distribution.parquet",
                    "extraction.parquet",
                    "instances.parquet",
                    "rejected.parquet",
                )
            ],
            f"season {season}",
        )
        summaries[source_name] = summary
    return summaries


def run_curation(
    season: str,
    sources: list[str] | None = None,
    dask_address: str | None = None,
    dask_workers: int | None = None,
    **kwargs,
) -> dict:
    spec = load_season(season, sources=sources)
    runner = task_runner(spec.max_concurrency, dask_address, dask_workers)
    return curation_season.with_options(task_runner=runner)(season=season, sources=sources, **kwargs)
