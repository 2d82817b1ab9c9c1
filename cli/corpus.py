"""Curation and the corpus: curate a season, publish it, list its instances, show an agent packet."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer

from cli.app import app, console, dataset_option, live_bar, prefect, prefect_ready
from tasks_lib.core.errors import InputError


@app.command()
def curate(
    season: str = typer.Option("demo", help="Season definition (data/season_defs/NAME.toml)."),
    source: list[str] = typer.Option([], help="Source name(s); default: the season's sources."),
    crawl: str | None = typer.Option(
        None, help="Crawl method: export, mirror or github (default by source)."
    ),
    prs_file: Path | None = typer.Option(None, help="A `gh pr list --json` export to import."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
    limit: int | None = typer.Option(None, help="Extract at most N PRs (highest priority first)."),
    until: str | None = typer.Option(None, help="Stop after this stage: crawl, filter or distribution."),
    max_concurrency: int | None = typer.Option(
        None, help="Extractions at once (default: the season's extraction.max_concurrency)."
    ),
    refresh: list[int] = typer.Option(
        [],
        "--refresh",
        help="Extract this PR again whatever its cached result (repeat): after a rule change that touches "
        "only some PRs (CHANGELOG.md).",
    ),
):
    """Run a curation season: crawl, filter, distribution, extraction, packaging, validation, tiering."""
    if prs_file is not None and not prs_file.is_file():
        raise InputError(f"--prs-file {prs_file}: no such file")
    # Choices are checked before Prefect starts (a typo costs no server start-up and no flow run).
    from tasks_lib.curation.plan import OFFLINE_STAGES
    from tasks_lib.sources.crawl.base import CRAWLED_FROM

    if crawl is not None and crawl not in CRAWLED_FROM:
        raise InputError(f"--crawl: one of {', '.join(sorted(CRAWLED_FROM))}, got {crawl!r}")
    if until is not None and until not in OFFLINE_STAGES:
        raise InputError(f"--until: one of {', '.join(OFFLINE_STAGES)}, got {until!r}")
    if limit is not None and limit < 1:
        raise InputError(f"--limit: a positive number of PRs, got {limit}")
    if max_concurrency is not None and max_concurrency < 1:
        raise InputError(f"--max-concurrency: a positive number of extractions, got {max_concurrency}")
    if any(n < 1 for n in refresh):
        raise InputError(f"--refresh: PR numbers, got {', '.join(str(n) for n in refresh if n < 1)}")
    if refresh and until is not None:
        raise InputError(f"--refresh goes with an extracting run, not with --until {until}")
    _preflight(season, source, crawl, prs_file, mirror)
    may_be_current = until is None and not refresh  # a refresh always runs the flow
    summaries = _up_to_date(season, source, crawl, prs_file, mirror, limit) if may_be_current else None
    if summaries is not None:
        _print_summaries(summaries)
        console.print(
            "up to date: every output of this season is that of these inputs (season-state.json); "
            "no container, Prefect not started",
            highlight=False,
        )
        return
    prefect()
    from flows.curation import run_curation
    from tasks_lib.core import progress

    prefect_ready()

    with _curation_progress(season) as on_pr:
        progress.CURATION.append(on_pr)
        try:
            summaries = run_curation(
                season,
                sources=list(source) or None,
                crawl_method=crawl,
                prs_file=str(prs_file) if prs_file else None,
                mirror=str(mirror) if mirror else None,
                limit=limit,
                until=until,
                max_concurrency=max_concurrency,
                refresh=list(refresh) or None,
            )
        finally:
            progress.CURATION.remove(on_pr)
    _print_summaries(summaries)


def _preflight(season, source, crawl, prs_file, mirror) -> None:
    """Every input of a curation checked before Prefect starts (one line and exit 2, not a traceback after a
    server start-up): the season definition, each source record, the mirror (there, and a git repository, for
    a source that clones from one) and every row of the export file."""
    from tasks_lib.curation.season import load_season
    from tasks_lib.curation.stages import pr_source
    from tasks_lib.sources import repos
    from tasks_lib.sources.record import load_source

    spec = load_season(season, sources=list(source) or None)
    for name in spec.sources:
        record = load_source(name)
        repos.origin(record, mirror)
        if prs_file is not None:
            for _ in pr_source(record, crawl, str(prs_file), str(mirror) if mirror else None).iter_merged_prs(
                None, None
            ):
                pass


def _up_to_date(season, source, crawl, prs_file, mirror, limit) -> dict | None:
    """The stored summaries when the season's outputs are already those of these inputs (season_state)."""
    from tasks_lib.curation import plan as season_plan
    from tasks_lib.curation import state as season_state
    from tasks_lib.curation.season import load_season

    spec = load_season(season, sources=list(source) or None)
    fp = season_state.fingerprint(
        season,
        list(source) or None,
        crawl,
        str(prs_file) if prs_file else None,
        str(mirror) if mirror else None,
        limit,
    )
    outs = {name: season_plan.source_out_dir(spec, name) for name in spec.sources}
    return season_state.up_to_date(outs, fp, spec.out_dir / ".season.lock")


def _print_summaries(summaries: dict) -> None:
    for name, summary in summaries.items():
        if "stopped_after" in summary:
            _print_offline_summary(name, Path(summary["out"]), summary["stopped_after"])
            continue
        console.print(
            f"[bold]{name}[/bold]: {summary['instances']} instance(s), {summary['rejected']} rejected "
            f"by schema, extraction {summary['extraction']} -> {summary['out']}"
        )


@contextlib.contextmanager
def _curation_progress(season: str):
    """On a terminal, a live bar per source from its plan on: PRs extracted of those planned, the last PR
    (status, F2P / P2P of both sides) and the counts per status; elsewhere only the flow's own line per PR
    (never a bar in a log)."""
    progress_bar = live_bar("{task.fields[last]}  {task.fields[counts]}", console)
    if progress_bar is None:
        yield lambda *_: None
        return
    from rich.markup import escape

    with progress_bar as bar:
        jobs: dict[str, int] = {}

        def on_pr(source_name, result, counts, total):
            if source_name not in jobs:
                jobs[source_name] = bar.add_task(
                    escape(f"{season}/{source_name}"), total=total, last="", counts=""
                )
            if result is None:  # planned: the bar shows 0/N until the first PR is extracted
                return
            last = (
                f"#{result.number} {result.status} F2P {len(result.tests('fail_to_pass'))} "
                f"P2P {len(result.tests('pass_to_pass'))}"
            )
            text = " · ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            bar.update(jobs[source_name], advance=1, last=escape(last), counts=escape(text))

        yield on_pr


def _print_offline_summary(name: str, out: Path, stage: str) -> None:
    """Counts per stage and per rejection reason, from the files the stages wrote."""
    import pandas as pd

    prs = pd.read_parquet(out / "prs.parquet")
    console.print(f"[bold]{name}[/bold]: crawl {len(prs)} merged PR(s) -> {out / 'prs.parquet'}")
    if stage == "crawl":
        return
    verdicts = pd.read_parquet(out / "filter.parquet")
    kept = int(verdicts["kept"].sum())
    console.print(f"filter: {kept} kept, {len(verdicts) - kept} rejected")
    reasons = verdicts.loc[~verdicts["kept"], "reasons"].explode().value_counts()
    for reason, n in reasons.items():
        console.print(f"  {n:>4}  {reason}", highlight=False)
    if stage == "distribution":
        dist = pd.read_parquet(out / "distribution.parquet")
        for row in dist[dist["dimension"] == "domain"].itertuples():
            console.print(f"distribution: {row.value:14} {row.count:>4}  {row.fraction:.0%}", highlight=False)


@app.command()
def funnel(
    season: str = typer.Option(..., help="Season name (data/season_defs/NAME.toml)."),
    source: str | None = typer.Option(None, help="One source of a multi-source season."),
):
    """A season's funnel (PRs -> filter reasons -> extracted -> valid), its table of extracted PRs and the
    images its runs used (lock contents, images built, build time, disk), as Markdown (what docs/validation.md
    shows per source). Reads a running or interrupted season as far as it got."""
    from tasks_lib.curation import funnel as funnel_lib
    from tasks_lib.curation import plan as season_plan
    from tasks_lib.curation.season import load_season

    spec = load_season(season)
    names = [source] if source else list(spec.sources)
    for name in names:
        if name not in spec.sources:
            raise InputError(
                f"--source: season {season} has no source {name!r} (it has {', '.join(spec.sources)})"
            )
        out = season_plan.source_out_dir(spec, name)
        typer.echo(f"## {name}\n\n" + funnel_lib.markdown(out))
        typer.echo(f"### Images of {name}'s runs\n\n" + funnel_lib.images(out, _image_rows()))


def _image_rows() -> list[dict]:
    """The engine's image rows (parent, build time, disk added) for `funnel`, or the build ledger's rows
    (parent and build time, no disk) when the engine does not answer: the funnel never needs Docker."""
    from tasks_lib.core.errors import InfraError
    from tasks_lib.images import lineage

    try:
        return lineage.image_rows()
    except InfraError:
        rows = [r for r in lineage.ledger_rows() if r["kind"] == "build"]
        return [{"tag": r["tag"], "parent": r.get("parent", ""), "build_s": r["seconds"]} for r in rows]


@app.command("corpus")
def corpus_cmd(
    name: str = typer.Argument(..., help="Corpus name: data/corpus/NAME/ (e.g. v0.2)."),
    season: list[str] = typer.Option([], "--season", help="A curated season whose instances go in (repeat)."),
    reuse: list[str] = typer.Option(
        [],
        "--reuse",
        help="A committed corpus whose instances go in re-packaged, never extracted again (repeat).",
    ),
):
    """Write a committed corpus, data/corpus/NAME/ (instances.jsonl, rejected.jsonl, statements.jsonl and a
    dataset card), from curated seasons' valid instances and re-packaged committed corpora; every statement
    under today's rules (curated statements, the leak gate). `--dataset NAME` then reads it without curating."""
    from tasks_lib.curation import release as corpus_release

    out = corpus_release.build(name, season, reuse)
    count = sum(1 for line in (out / "instances.jsonl").read_text().splitlines() if line.strip())
    left = sum(1 for line in (out / "rejected.jsonl").read_text().splitlines() if line.strip())
    console.print(
        f"corpus {name}: {count} instance(s), {left} left out by the statement rules -> {out}",
        highlight=False,
    )


@app.command()
def publish(
    season: str = typer.Option(..., help="Season whose export (data/seasons/SEASON/hf) to publish."),
    repo_id: str = typer.Option(..., help="Hugging Face dataset repository, e.g. org/prototypebench-s1."),
    private: bool = typer.Option(True, help="Create the dataset repository as private."),
    tier: list[str] = typer.Option(["public"], help="Contamination tiers to publish (never internal_only)."),
):
    """Optional: push a season's `datasets` export to the Hugging Face Hub. Needs HF_TOKEN; never required."""
    import os

    from tasks_lib.core import paths

    token = os.environ.get("HF_TOKEN")
    if not token:
        raise InputError(
            "publish: set HF_TOKEN to a Hugging Face token with write access (it is never logged)"
        )
    if "internal_only" in tier:
        raise InputError("--tier internal_only: internal-only tasks are never published")
    hf_dir = paths.seasons_dir() / season / "hf"
    if not hf_dir.is_dir():
        raise InputError(
            f"--season {season}: no export at {hf_dir} (run `pbench curate --season {season}` first)"
        )
    import datasets

    dd = datasets.load_from_disk(str(hf_dir))
    dd = dd.filter(lambda row: row["contamination_tier"] in set(tier))
    dd.push_to_hub(repo_id, token=token, private=private)
    console.print(f"published {sum(len(s) for s in dd.values())} instance(s) of tiers {tier} to {repo_id}")


def _corpus(dataset: str) -> list:
    from tasks_lib.corpus import load as corpus

    return corpus.load_corpus(dataset)


@app.command("list")
def list_cmd(
    dataset: str = dataset_option(),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per instance (JSON Lines)."),
):
    """The corpus, one line per instance."""
    for inst in _corpus(dataset):
        if as_json:
            row = {
                "instance_id": inst.instance_id,
                "repo": inst.repo,
                "stack_domain": inst.stack_domain,
                "contamination_tier": inst.contamination_tier,
                "created_at": inst.created_at,
                "fail_to_pass": {s: inst.fail_to_pass.of(s) for s in ("backend", "frontend")},
                "pass_to_pass_count": {s: len(inst.pass_to_pass.of(s)) for s in ("backend", "frontend")},
            }
            typer.echo(json.dumps(row, ensure_ascii=False))
            continue
        f2p = len(inst.fail_to_pass.backend) + len(inst.fail_to_pass.frontend)
        p2p = len(inst.pass_to_pass.backend) + len(inst.pass_to_pass.frontend)
        typer.echo(
            f"{inst.instance_id:48} {inst.stack_domain:14} {inst.contamination_tier:13} "
            f"F2P {f2p:>3}  P2P {p2p:>4}  {inst.created_at[:10]}"
        )


def _instance(dataset: str, instance_id: str):
    from tasks_lib.corpus import load as corpus

    inst = corpus.find_instance(dataset, instance_id)
    if inst is None:
        raise InputError(f"{instance_id}: not in corpus {dataset}")
    return inst


AGENT_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "stack_domain",
    "environment",
    "created_at",
)


@app.command()
def show(
    instance_id: str = typer.Argument(...),
    dataset: str = dataset_option(),
    as_json: bool = typer.Option(False, "--json", help="Emit the agent packet as JSON."),
    with_hints: bool = typer.Option(
        False, "--with-hints", help="Add hints_text (the issue's comments before the fix's first commit)."
    ),
):
    """The agent packet: problem statement, repo, base commit, environment. Never tests or patch; hints only
    with --with-hints (SWE-bench's hints setting)."""
    inst = _instance(dataset, instance_id)
    packet = {k: inst[k] for k in AGENT_FIELDS}
    if with_hints:
        packet["hints_text"] = inst.get("hints_text") or ""
    if as_json:
        typer.echo(json.dumps(packet, indent=2, ensure_ascii=False))
        return
    typer.echo(
        f"{packet['instance_id']}  ({packet['stack_domain']})\nrepo {packet['repo']} at {packet['base_commit']}"
    )
    typer.echo("environment: " + ", ".join(f"{k}={v}" for k, v in packet["environment"].items() if v))
    typer.echo("\n" + packet["problem_statement"])
    if with_hints and packet["hints_text"]:
        typer.echo("\nhints:\n" + packet["hints_text"])


@app.command()
def export(
    dataset: str = dataset_option(),
    fmt: str = typer.Option("swebench", "--format", help="Output format: swebench (flat SWE-bench records)."),
    out: Path = typer.Option(
        ..., help="A .jsonl or .parquet file, or a folder for a `datasets` save_to_disk copy."
    ),
    with_frontend_only: bool = typer.Option(
        False,
        "--with-frontend-only",
        help="Also the instances without a pytest FAIL_TO_PASS test (SWE-bench's grading resolves any patch "
        "that keeps their PASS_TO_PASS: read them with PrototypeBench's harness only).",
    ),
):
    """A corpus in SWE-bench's flat shape: FAIL_TO_PASS / PASS_TO_PASS as JSON strings (pytest ids), the
    Playwright ids apart in FAIL_TO_PASS_FRONTEND / PASS_TO_PASS_FRONTEND. Instances without a pytest
    FAIL_TO_PASS test are left out unless --with-frontend-only (their FAIL_TO_PASS would be "[]")."""
    if fmt != "swebench":
        raise InputError(f"--format: one of swebench, got {fmt!r}")
    if out.suffix[1:].isalpha() and out.suffix not in (".jsonl", ".parquet"):
        # Any other name is a `datasets` folder: `x.csv` would have been a folder named so (`v0.3` is a name).
        raise InputError(
            f"--out {out}: a .jsonl or .parquet file, or a folder name without a suffix (got {out.suffix!r})"
        )
    from tasks_lib.corpus import swebench

    instances = _corpus(dataset)
    kept, left = swebench.gradable(instances)
    chosen = instances if with_frontend_only else kept
    path = swebench.write(chosen, out)
    console.print(
        f"{len(chosen)} instance(s) -> {path} (SWE-bench fields, frontend tests apart)", highlight=False
    )
    if left and not with_frontend_only:
        console.print(
            f"{len(left)} instance(s) without a pytest FAIL_TO_PASS test left out (SWE-bench's grading would "
            f"resolve any patch on them; --with-frontend-only to include them): "
            + ", ".join(i["instance_id"] for i in left),
            highlight=False,
        )
