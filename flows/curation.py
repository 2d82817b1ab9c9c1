"""The curation season flow: wiring of the stages in tasks_lib.curation.stages, with caching and retries.

The expensive stage, FAIL_TO_PASS extraction, is cached per PR on its content (repository, base and head
commits, lock hashes at both, run counts, harness version), not on the flow run: a rerun of the same
season starts no container, and a crash halfway resumes from the PRs that finished.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import logging
import time
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.logging import get_run_logger

from flows import artifacts
from flows.runners import lean_thread_pool, task_runner, windowed, without_heartbeats
from tasks_lib.core import prefect_env, progress, stopping
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import ExtractionStatus
from tasks_lib.core.errors import InfraError, InputError
from tasks_lib.curation import extraction, outcomes, resume
from tasks_lib.curation import plan as season_plan
from tasks_lib.curation import stages as curation
from tasks_lib.curation import state as season_state
from tasks_lib.curation.season import Season, load_season
from tasks_lib.engine.harness_id import harness_key
from tasks_lib.images import build as images
from tasks_lib.sources import repos
from tasks_lib.sources.record import load_source


def _logger():
    try:
        return get_run_logger()
    except Exception:  # called outside a run (unit tests of the wiring)
        return logging.getLogger("pbench.curation")


# GitHub unavailable (after PyGithub's own retries) is an InfraError: retried with a growing delay.
@task(retries=3, retry_delay_seconds=[10, 60, 300], retry_condition_fn=lambda t, r, s: _is_transient(s))
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
        key=artifacts.key(f"distribution-{season.name}"),
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
    harness_key: str = "",
    labels: str = "pbench",
    collection_errors: str = "continue",
) -> dict:
    # The PR's era decides lock files, installer and commands (e.g. poetry before uv).
    source = load_source(source_name).for_era(era)
    repo = repos.repo_dir(source, mirror)
    result = extraction.extract(
        source,
        repo,
        number,
        base,
        head,
        Path(log_dir),
        head_runs=head_runs,
        base_runs=base_runs,
        labels=labels,
        collection_errors=collection_errors,
    )
    if result.status in (ExtractionStatus.INFRA_ERROR, ExtractionStatus.TIMEOUT):
        raise TransientExtractionError(f"#{number}: {result.status}: {result.error}", log_path=log_dir)
    return result.to_row()


_EXTRACT_FN = extract_pr.fn  # the task's own function, whatever stands in for the task (unit tests)


@task
def package_stage(season: Season, source_name: str, out: str, mirror: str | None) -> dict:
    summary = curation.stage_package(season, load_source(source_name), Path(out), mirror)
    curation.export_dataset(season, Path(out))
    return summary


@flow(name="curation-season", task_runner=lean_thread_pool(2))
def curation_season(
    season: str = "demo",
    sources: list[str] | None = None,
    crawl_method: str | None = None,
    prs_file: str | None = None,
    mirror: str | None = None,
    limit: int | None = None,
    until: str | None = None,
    max_concurrency: int | None = None,
    refresh: list[int] | None = None,
) -> dict:
    """Crawl -> filter -> distribution -> extraction -> packaging/tiering/validation, per source.

    At most the season's `extraction.max_concurrency` extractions at once (`max_concurrency` overrides it),
    whatever task runner the flow was started with: a deployment run behaves as the CLI's.

    `until="distribution"` stops after the offline stages (no container): a first look at a new export.
    `refresh` names PRs extracted again whatever their cached results (a rule change that touches only them:
    CHANGELOG.md).
    """
    stopping.chain_sigterm()  # SIGTERM reaches the worker threads too: a stop within seconds
    if until not in (None, *season_plan.OFFLINE_STAGES):
        raise InputError(f"--until: one of {', '.join(season_plan.OFFLINE_STAGES)}, got {until!r}")
    spec = load_season(season, sources=sources)
    summaries = {}
    with season_plan.season_lock(spec, _logger().warning):
        fp = _fingerprint(season, sources, crawl_method, prs_file, mirror, limit, until)
        for source_name in spec.sources:
            out = season_plan.source_out_dir(spec, source_name)
            out.mkdir(parents=True, exist_ok=True)
            if until is None:
                # A run that may change what the season holds. An offline look (--until) keeps a finished
                # season's state: what it rewrites is the same, or the state's outputs no longer match.
                season_state.forget(out)
            kept = outcomes.folder(spec.name, source_name) if spec.keep_outcomes else None
            outcomes.merge_runs(kept, out)  # wall-time lines of runs on other machines count too
            try:
                with season_plan.run_ledger(out, until):
                    summaries[source_name] = _source(
                        spec,
                        source_name,
                        out,
                        crawl_method,
                        prs_file,
                        mirror,
                        limit,
                        until,
                        max_concurrency,
                        frozenset(refresh or ()),
                    )
            finally:
                outcomes.merge_runs(kept, out)
        if until is None:  # every source completed: the next run with these inputs has nothing to do
            for source_name, summary in summaries.items():
                out = season_plan.source_out_dir(spec, source_name)
                season_state.record(out, fp, summary, list(summary.get("extraction", {})))
    return summaries


def _fingerprint(season, sources, crawl_method, prs_file, mirror, limit, until) -> str | None:
    """The inputs' fingerprint (`tasks_lib.curation.state`), taken before anything runs; never fatal."""
    if until is not None:
        return None
    try:
        return season_state.fingerprint(season, sources, crawl_method, prs_file, mirror, limit)
    except Exception as exc:
        _logger().warning("season fingerprint not taken (the next run will run the flow): %s", exc)
        return None


def _source(
    spec: Season,
    source_name: str,
    out: Path,
    crawl_method,
    prs_file,
    mirror,
    limit,
    until,
    concurrency,
    refresh: frozenset[int] = frozenset(),
) -> dict:
    logger = _logger()
    crawl(spec, source_name, crawl_method, prs_file, mirror, str(out))
    if until == "crawl":
        return season_plan.stopped(out, until)
    filter_stage(source_name, str(out))
    if until == "filter":
        return season_plan.stopped(out, until)
    for warning in distribution_stage(spec, source_name, str(out)):
        logger.warning("distribution: %s", warning)
    if until == "distribution":
        return season_plan.stopped(out, until)
    source = load_source(source_name)
    jobs, results = season_plan.plan_extractions(
        spec, source, repos.repo_dir(source, mirror), out, limit, images.identity()
    )
    not_listed = curation.listed_not_kept(source, out, spec.prs, spec.waive) if spec.prs else {}
    for number, why in not_listed.items():
        logger.warning("%s: PR #%d of extraction.prs is not extracted: %s", source_name, number, why)
    for number in sorted(refresh - {job.number for job in jobs}):
        logger.warning(
            "%s: --refresh #%d: not among the PRs this run extracts (filtered out, or past --limit)",
            source_name,
            number,
        )
    logger.info("%s: extracting FAIL_TO_PASS for %d PR(s)", source_name, len(jobs))
    _extract_all(
        spec, source, source_name, jobs, mirror, concurrency or spec.max_concurrency, results, out, refresh
    )
    curation.write_extraction(results, out)
    summary = season_plan.finish_source(
        spec, out, results, package_stage(spec, source_name, str(out), mirror), not_listed
    )
    create_table_artifact(
        key=artifacts.key(f"extraction-{spec.name}-{source_name}"),
        table=season_plan.extraction_table(results),
        description=f"FAIL_TO_PASS extraction, season {spec.name}, source {source_name}",
    )
    artifacts.link_outputs(
        f"season-{spec.name}-{source_name}",
        [out / n for n in season_plan.SEASON_TABLES],
        f"season {spec.name}",
    )
    return summary


def _key_parts(spec: Season, job: season_plan.ExtractionJob) -> tuple[str, ...]:
    """What a PR's result is cached on: an interrupted attempt's finished runs are taken over under it
    (tasks_lib/curation/resume.py), a settled or kept outcome answers under it; a refreshed PR runs again."""
    return (
        job.harness_key,
        job.deps_key,
        job.base,
        job.head,
        job.era or "",
        str(spec.head_runs),
        str(spec.base_runs),
    )


def _outcome_key(source, spec: Season, job: season_plan.ExtractionJob) -> str:
    """The key a kept outcome answers under on any machine (tasks_lib/curation/outcomes.py): the PR's cache
    key with the base images named by what they are built from (the Debian suite; the harness key already
    holds every file under containers/) instead of this engine's image ids, which differ on every machine that
    bootstraps its own root filesystem; and the extraction task's source, as Prefect's cache key holds it. A
    rule change is a version bump (CHANGELOG.md), part of the harness key, as for the cache."""
    placeless = harness_key(source.for_era(job.era), f"debian={Settings.from_env().debian_suite}")
    parts = (placeless, *_key_parts(spec, job)[1:], _task_source())
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


@functools.cache
def _task_source() -> str:
    return hashlib.sha256(inspect.getsource(_EXTRACT_FN).encode()).hexdigest()


def _extract_all(
    spec: Season,
    source,
    source_name: str,
    jobs,
    mirror,
    concurrency: int,
    results: list,
    out: Path,
    refresh: frozenset[int] = frozenset(),
) -> None:
    """Every job's extraction appended to `results` (which may hold results planned without a run), at most
    `concurrency` at once whatever task runner the flow was started with (the CLI's or a deployment's
    default), with cached results in the project's cache folder whoever runs the flow; progress reported per
    PR as it finishes, and `out`'s extraction.parquet rewritten at most every 30 s (a running or interrupted
    season reads as far as it got). A PR in `refresh` is extracted again whatever its cached result (and the
    fresh one is cached). A PR that timed out after its retries is settled under its key: it is not run again
    until the key changes or it is refreshed (tasks_lib/curation/resume.py). A season that keeps its outcomes
    (`extraction.keep_outcomes`) keeps each PR's under its key as it is reported and is answered from them on
    any checkout (tasks_lib/curation/outcomes.py)."""
    logger = _logger()
    task = extract_pr.with_options(result_storage=prefect_env.result_storage())
    fresh = task.with_options(refresh_cache=True)

    def key(job: season_plan.ExtractionJob) -> tuple[str, ...]:
        return _key_parts(spec, job)

    done = itertools.count(1)
    kept = outcomes.folder(spec.name, source_name) if spec.keep_outcomes else None

    def report(job: season_plan.ExtractionJob, result: extraction.ExtractionResult) -> None:
        results.append(result)
        logger.info(season_plan.progress(next(done), len(jobs), result))
        progress.notify_curation(source_name, result, season_plan.status_counts(results), len(jobs))
        if kept is not None and outcomes.keep(
            kept, job.number, _outcome_key(source, spec, job), result.to_row(), job.log_dir
        ):
            outcomes.merge_runs(kept, out)  # a run lost with its machine counts up to here

    def answered(job: season_plan.ExtractionJob) -> tuple[dict | None, str]:
        """The outcome a PR has without running: settled here, or kept under the same key."""
        if job.number in refresh:
            return None, ""
        record = resume.settled(job.log_dir, key(job))
        if record is None and kept is not None:
            return outcomes.answer(
                kept, job.number, _outcome_key(source, spec, job), job.log_dir
            ), f"kept in {kept}"
        return record, "settled"

    progress.notify_curation(source_name, None, {}, len(jobs))  # planned: a bar shows 0/N before the first PR
    to_run = []
    for job in jobs:
        record, why = answered(job)
        if record is None:
            to_run.append(job)
            continue
        logger.info(
            "#%s: %s under the same key: %s (--refresh %s runs it again)",
            *(job.number, why, record["status"], job.number),
        )
        report(job, extraction.ExtractionResult.from_row(record))

    def submit(job: season_plan.ExtractionJob):
        resume.set_pr_key(job.log_dir, None if job.number in refresh else key(job))
        return (fresh if job.number in refresh else task).submit(
            source_name,
            source.repo,
            job.number,
            job.base,
            job.head,
            job.deps_key,
            spec.head_runs,
            spec.base_runs,
            job.log_dir,
            mirror,
            job.era,
            job.harness_key,
            spec.labels,
            spec.collection_errors,
        )

    written = time.monotonic()
    for job, fut in windowed(to_run, submit, concurrency):
        try:
            result = extraction.ExtractionResult.from_row(fut.result())
        except InfraError as exc:
            record = resume.settle(job.log_dir)
            result = (
                season_plan.failed_job(job, str(exc))
                if record is None
                else extraction.ExtractionResult.from_row(record)
            )
        report(job, result)
        if time.monotonic() - written > 30:  # a running season reads as far as it got
            curation.write_extraction(results, out)
            written = time.monotonic()


def run_curation(
    season: str,
    sources: list[str] | None = None,
    dask_address: str | None = None,
    dask_workers: int | None = None,
    **kwargs,
) -> dict:
    spec = load_season(season, sources=sources)
    runner = task_runner(kwargs.get("max_concurrency") or spec.max_concurrency, dask_address, dask_workers)
    if dask_address or dask_workers:  # the cluster's size decides
        kwargs["max_concurrency"] = dask_workers or 1_000_000
    with without_heartbeats():
        return curation_season.with_options(task_runner=runner)(season=season, sources=sources, **kwargs)
