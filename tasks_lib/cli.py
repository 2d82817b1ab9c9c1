"""`pbench`: the operators', evaluators' and analysts' command line. Thin: heavy modules load lazily.

Exit codes (ARCHITECTURE.md): 0 resolved / success, 1 not resolved (a meaningful result), 2 the harness
could not run (bad input, infrastructure). Never 0 on an error.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from tasks_lib.constants import ExitCode
from tasks_lib.errors import InputError, PbenchError

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="PrototypeBench curation and evaluation harness."
)
images_app = typer.Typer(no_args_is_help=True, help="Base, service and environment images.")
app.add_typer(images_app, name="images")
# soft_wrap: never insert line breaks. Scripts, CI logs and operators grep one-line errors and copy paths out
# of them; on a terminal the terminal wraps long lines itself, without breaking a path inside.
console = Console(stderr=True, soft_wrap=True)


def _fail(message: str, code: int = ExitCode.HARNESS_ERROR):
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


@images_app.command("bootstrap")
def images_bootstrap():
    """Build (or find) the base and Postgres images. A second call builds nothing."""
    from tasks_lib import images

    refs = images.bootstrap(say=lambda m: console.print(f"[dim]{m}[/dim]"))
    for name, ref in refs.items():
        state = f"built in {ref.seconds:.0f}s" if ref.built else "cached"
        console.print(f"{name:9} {ref.tag}  {ref.id[:19]}  {state}")


@images_app.command("list")
def images_list():
    """Images this project built, with their content keys."""
    from tasks_lib import images

    for row in images.list_images():
        typer.echo(
            f"{', '.join(row['tags']) or '<untagged>'}\t{row['size_mb']} MB\tkey={str(row['key'])[:16]}"
        )


@images_app.command("env")
def images_env(
    source: str = typer.Option("demo", help="Source name (data/sources/NAME.toml) or path."),
    commit: str = typer.Option("HEAD", help="Commit whose dependency files define the image."),
    mirror: Path | None = typer.Option(
        None, help="Local mirror of the source repository (overrides the record)."
    ),
):
    """Build (or find) the backend environment image for a commit's lock files."""
    from tasks_lib import gitops, images
    from tasks_lib.sources import load_source

    src = load_source(source)
    repo = gitops.repo_dir(src, mirror)
    sha = gitops.resolve(repo, commit)
    spec = images.backend_env_spec(src, images.dependency_contents(src, repo, sha))
    ref = images.ensure_env_image(spec)
    state = f"built in {ref.seconds:.0f}s, log {ref.log_path}" if ref.built else "cached"
    typer.echo(f"{ref.tag}  lock {spec.lock_sha[:23]}  {state}")


@images_app.command("prune")
def images_prune(
    older_than_days: float = typer.Option(30.0, min=0, help="Remove env images unused for this many days."),
    dry_run: bool = typer.Option(False, help="Only list what would be removed."),
):
    """Free disk: remove environment images not used recently (rebuilt from their lock when needed again)."""
    from tasks_lib import images

    rows = images.prune_env_images(older_than_days, dry_run)
    for row in rows:
        typer.echo(
            f"{'would remove' if dry_run else 'removed'} {', '.join(row['tags'])}  {row['size_mb']} MB  "
            f"last used {row['last_used']}"
        )
    typer.echo(f"{len(rows)} image(s), {sum(r['size_mb'] for r in rows):.0f} MB")


@app.command()
def limits(
    docker_slots: int = typer.Option(2, min=1, help="Test stacks running at once on this host."),
    github_per_hour: int = typer.Option(4000, min=1, help="GitHub API calls per hour (of the 5000 allowed)."),
):
    """Create or update the Prefect global concurrency limits (Docker slots of this host, GitHub API)."""
    _prefect()
    from tasks_lib import limits as limits_mod

    for name, spec in limits_mod.ensure_limits(docker_slots, github_per_hour).items():
        typer.echo(
            f"{name}: limit {spec['limit']}, decay {spec['slot_decay_per_second']:.3f}/s, "
            f"active {spec['active']}"
        )


@app.command()
def cleanup(
    all_owners: bool = typer.Option(False, "--all", help="Every owner's objects, not only PBENCH_OWNER's."),
):
    """Remove the containers, networks and volumes left by an interrupted run (by the project's labels)."""
    from tasks_lib import engine

    counts = engine.cleanup_leftovers(all_owners)
    typer.echo(", ".join(f"{v} {k}" for k, v in counts.items()) + " removed")


@app.command("run-tests")
def run_tests_cmd(
    commit: str = typer.Argument(..., help="Commit (or rev) to check out."),
    source: str = typer.Option("demo", help="Source name or path."),
    patch: list[Path] = typer.Option([], help="Patch files, applied in order."),
    select: list[str] = typer.Option([], help="Test ids or files to run (default: the whole suite)."),
    out: Path | None = typer.Option(None, help="Log folder (default: data/cache/adhoc/<commit>)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
):
    """Run one source's tests at a commit with patches, through the engine (debugging aid)."""
    from tasks_lib import engine, gitops, paths
    from tasks_lib.sources import load_source

    src = load_source(source)
    repo = gitops.repo_dir(src, mirror)
    sha = gitops.resolve(repo, commit)
    patches = []
    for p in patch:
        if not p.is_file():
            raise InputError(f"--patch {p}: no such file")
        patches.append(engine.PatchInput(p.stem, p.read_text()))
    log_dir = out or paths.cache_dir() / "adhoc" / sha[:12]
    result = engine.run_tests(engine.RunRequest(src, repo, sha, log_dir, tuple(patches), tuple(select)))
    counts: dict[str, int] = {}
    for outcome in result.tests.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    typer.echo(
        json.dumps(
            {
                "status": result.status,
                "suite_ran": result.suite_ran,
                "exit_code": result.exit_code,
                "outcomes": counts,
                "collection_errors": result.collection_errors,
                "timings": result.timings,
                "log_dir": result.log_dir,
                "error": result.error,
            },
            indent=2,
        )
    )
    raise typer.Exit(0 if result.status == "completed" else ExitCode.HARNESS_ERROR)


DEFAULT_DATASET = "demo"
_DATASET_HELP = (
    "Corpus: a season name or folder, a .jsonl/.json/.parquet file, a saved dataset folder, or hf:<id>."
)


def _prefect():
    from tasks_lib import prefect_env

    prefect_env.configure()


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
):
    """Run a curation season: crawl, filter, distribution, extraction, packaging, validation, tiering."""
    if prs_file is not None and not prs_file.is_file():
        raise InputError(f"--prs-file {prs_file}: no such file")
    _prefect()
    from flows.curation import run_curation

    summaries = run_curation(
        season,
        sources=list(source) or None,
        crawl_method=crawl,
        prs_file=str(prs_file) if prs_file else None,
        mirror=str(mirror) if mirror else None,
        limit=limit,
        until=until,
    )
    for name, summary in summaries.items():
        if "stopped_after" in summary:
            _print_offline_summary(name, Path(summary["out"]), summary["stopped_after"])
            continue
        console.print(
            f"[bold]{name}[/bold]: {summary['instances']} instance(s), {summary['rejected']} rejected "
            f"by schema, extraction {summary['extraction']} -> {summary['out']}"
        )


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
def publish(
    season: str = typer.Option(..., help="Season whose export (data/seasons/SEASON/hf) to publish."),
    repo_id: str = typer.Option(..., help="Hugging Face dataset repository, e.g. org/prototypebench-s1."),
    private: bool = typer.Option(True, help="Create the dataset repository as private."),
    tier: list[str] = typer.Option(["public"], help="Contamination tiers to publish (never internal_only)."),
):
    """Optional: push a season's `datasets` export to the Hugging Face Hub. Needs HF_TOKEN; never required."""
    import os

    from tasks_lib import paths

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


def _corpus(dataset: str) -> list[dict]:
    from tasks_lib import corpus

    return corpus.load_corpus(dataset)


@app.command("list")
def list_cmd(dataset: str = typer.Option(DEFAULT_DATASET, help=_DATASET_HELP)):
    """The corpus, one line per instance."""
    for inst in _corpus(dataset):
        f2p = sum(len(v) for v in inst["fail_to_pass"].values())
        p2p = sum(len(v) for v in inst["pass_to_pass"].values())
        typer.echo(
            f"{inst['instance_id']:48} {inst['stack_domain']:14} {inst['contamination_tier']:13} "
            f"F2P {f2p:>3}  P2P {p2p:>4}  {inst['created_at'][:10]}"
        )


def _instance(dataset: str, instance_id: str) -> dict:
    for inst in _corpus(dataset):
        if inst["instance_id"] == instance_id:
            return inst
    raise InputError(f"{instance_id}: not in corpus {dataset}")


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
    dataset: str = typer.Option(DEFAULT_DATASET, help=_DATASET_HELP),
    as_json: bool = typer.Option(False, "--json", help="Emit the agent packet as JSON."),
):
    """The agent packet: problem statement, repo, base commit, environment. Never tests, patch or hints."""
    inst = _instance(dataset, instance_id)
    packet = {k: inst[k] for k in AGENT_FIELDS}
    if as_json:
        typer.echo(json.dumps(packet, indent=2, ensure_ascii=False))
        return
    typer.echo(
        f"{packet['instance_id']}  ({packet['stack_domain']})\nrepo {packet['repo']} at {packet['base_commit']}"
    )
    typer.echo("environment: " + ", ".join(f"{k}={v}" for k, v in packet["environment"].items() if v))
    typer.echo("\n" + packet["problem_statement"])


@app.command()
def score(
    instance_id: str = typer.Argument(...),
    patch: str = typer.Option(..., help="A unified diff file, or the specials 'gold' / 'empty'."),
    out: Path | None = typer.Option(None, help="Folder for verdict.json and the trace."),
    dataset: str = typer.Option(DEFAULT_DATASET, help=_DATASET_HELP),
    source: str | None = typer.Option(None, help="Source record (default: by the instance's repo)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
):
    """Score one patch: exit 0 resolved, 1 not resolved, 2 the harness could not run."""
    from tasks_lib import corpus, evaluation, paths
    from tasks_lib.predictions import Prediction, PredictionFormat

    inst = _instance(dataset, instance_id)
    if patch in ("gold", "empty"):
        text, fmt = (inst["patch"] if patch == "gold" else ""), PredictionFormat(patch)
    else:
        p = Path(patch)
        if not p.is_file():
            raise InputError(f"--patch {patch}: no such file (or use 'gold' / 'empty')")
        # Bytes as written: no newline translation (a CRLF file's patch keeps its CRs), no decoding error.
        text, fmt = p.read_bytes().decode("utf-8", errors="surrogateescape"), PredictionFormat.DIFF
    prediction = Prediction(instance_id, "cli", text, fmt)
    src = corpus.source_for(inst, source)
    repo = evaluation.repo_for(src, mirror)
    out = out or paths.runs_dir() / "score" / f"{instance_id}-{prediction.patch_sha256[:12]}"
    verdict = evaluation.score_instance(inst, prediction, src, repo, out / "logs")
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2))
    color = "green" if verdict.resolved else ("red" if not verdict.infra_failure else "yellow")
    console.print(
        f"[{color}]{verdict.status}[/{color}]  F2P {verdict.f2p_passed}/{verdict.f2p_total}  "
        f"P2P {verdict.p2p_passed}/{verdict.p2p_total}  {escape(verdict.note)}  ->  {escape(str(out))}",
        highlight=False,
    )
    if verdict.status in ("patch_invalid",) or verdict.infra_failure:
        raise typer.Exit(
            ExitCode.HARNESS_ERROR if verdict.status != "patch_invalid" else ExitCode.HARNESS_ERROR
        )
    raise typer.Exit(ExitCode.RESOLVED if verdict.resolved else ExitCode.NOT_RESOLVED)


def _evaluate(
    dataset,
    predictions,
    model,
    model_cutoff,
    run_id,
    max_workers,
    ids=(),
    domains=(),
    tiers=(),
    source=None,
    mirror=None,
    dask_address=None,
    dask_workers=None,
) -> dict:
    from tasks_lib import evaluation

    # Bad input (corpus, predictions, model, cutoff, run folder) is refused before Prefect starts: inside
    # a flow run the refusal would come after a server start-up, logged with a traceback.
    evaluation.plan_run(
        dataset,
        predictions,
        model,
        model_cutoff,
        run_id,
        ids=ids,
        domains=domains,
        tiers=tiers,
        source=source,
        mirror=str(mirror) if mirror else None,
    )
    _prefect()
    from flows import evaluation as eval_flow
    from tasks_lib import progress

    with _verdict_progress(model) as on_verdict:
        progress.CALLBACKS.append(on_verdict)
        try:
            return eval_flow.run_evaluation(
                max_workers=max_workers,
                dask_address=dask_address,
                dask_workers=dask_workers,
                dataset=dataset,
                predictions=predictions,
                model=model,
                model_cutoff=model_cutoff,
                run_id=run_id,
                ids=list(ids),
                domains=list(domains),
                tiers=list(tiers),
                source=source,
                mirror=str(mirror) if mirror else None,
            )
        finally:
            progress.CALLBACKS.remove(on_verdict)


@contextlib.contextmanager
def _verdict_progress(model: str):
    """A live bar on a terminal; elsewhere (CI logs, pipes) nothing more than the flow's own line per verdict."""

    def counts_text(counts) -> str:
        return f"resolved {counts['resolved']} · failed {counts['failed']} · errored {counts['errored']}"

    if not console.is_terminal:
        # The flow prints one plain line per verdict already; a bar rendered into a log would be cut at 80
        # columns.
        yield lambda *_: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        redirect_stdout=False,  # a proxied stdout holds a lock that Dask cannot pickle with task context
        redirect_stderr=False,
    ) as bar:
        job = bar.add_task(escape(model), total=None, counts="")

        def on_bar(v, counts, total):
            bar.update(job, total=total, advance=1, counts=counts_text(counts))

        yield on_bar


@app.command()
def evaluate(
    predictions: str = typer.Option(..., help="Predictions file (JSONL/JSON), or 'gold' / 'empty'."),
    model: str = typer.Option(..., help="Model id (stored with the run)."),
    model_cutoff: str = typer.Option(..., help="The model's disclosed training cutoff, YYYY-MM-DD."),
    run_id: str | None = typer.Option(None, help="Run folder name (default: model + predictions hash)."),
    max_workers: int = typer.Option(2, min=1, help="Instances scored in parallel."),
    dataset: str = typer.Option(DEFAULT_DATASET, help=_DATASET_HELP),
    ids: list[str] = typer.Option([], "--id", help="Only these instance ids."),
    domain: list[str] = typer.Option([], help="Only these stack domains."),
    tier: list[str] = typer.Option([], help="Only these contamination tiers."),
    source: str | None = typer.Option(None, help="Source record (default: by each instance's repo)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
    dask_address: str | None = typer.Option(
        None, help="Run the fan-out on this Dask scheduler (tcp://host:8786)."
    ),
    dask_workers: int | None = typer.Option(
        None, help="Run the fan-out on a local Dask cluster of N workers."
    ),
):
    """Evaluate one model's predictions: data/runs/<run_id>/ with Parquet results and a report."""
    report = _evaluate(
        dataset,
        predictions,
        model,
        model_cutoff,
        run_id,
        max_workers,
        ids,
        domain,
        tier,
        source,
        mirror,
        dask_address=dask_address,
        dask_workers=dask_workers,
    )
    typer.echo((Path(report["out_dir"]) / "report.txt").read_text())


@app.command()
def report(run_dirs: list[Path] = typer.Argument(..., help="Run folders (data/runs/<run_id>).")):
    """Aggregate one or many runs into a leaderboard: models x domains x tiers, failures by kind."""
    from tasks_lib import reporting

    typer.echo(reporting.leaderboard(run_dirs))


@app.command()
def validate(
    dataset: str = typer.Option(DEFAULT_DATASET, help=_DATASET_HELP),
    max_workers: int = typer.Option(2, min=1),
    source: str | None = typer.Option(None),
    mirror: Path | None = typer.Option(None),
):
    """Harness self-test: `gold` must resolve every instance and `empty` none. Exit 1 on any exception."""
    problems = []
    for special, want in (("gold", True), ("empty", False)):
        rep = _evaluate(
            dataset,
            special,
            f"self-test-{special}",
            "1970-01-01",
            None,
            max_workers,
            source=source,
            mirror=mirror,
        )
        out = Path(rep["out_dir"])
        typer.echo((out / "report.txt").read_text())
        for iid, status in rep["instances"].items():
            if (status == "resolved") != want:
                problems.append(f"{special}: {iid} is {status} (trace: {out / 'logs' / iid})")
    if problems:
        console.print("[red]self-test failed[/red]:\n  " + "\n  ".join(problems), highlight=False)
        raise typer.Exit(1)
    console.print("[green]self-test passed[/green]: gold resolves every instance, empty none")


@app.command()
def demo(max_workers: int = typer.Option(2, min=1)):
    """The main job on the embedded demo source: curation season `demo`, then gold/empty evaluation."""
    curate(season="demo", source=[], crawl=None, prs_file=None, mirror=None, limit=None, until=None)
    validate(dataset="demo", max_workers=max_workers, source=None, mirror=None)


def _on_sigterm(signum, frame):
    # Turn SIGTERM into KeyboardInterrupt so every `finally` removes its containers.
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("PBENCH_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        rc = app(standalone_mode=False)
    except typer.Exit as exc:
        rc = exc.exit_code
    except (typer.BadParameter, typer.Abort) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        sys.exit(ExitCode.HARNESS_ERROR)
    except InputError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except PbenchError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished work is kept; rerun the same command to resume")
        sys.exit(130)
    except Exception as exc:
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(ExitCode.HARNESS_ERROR)
        raise
    sys.exit(rc or 0)


def _print_error(exc: PbenchError) -> None:
    # Messages quote user input ("[acme__app-1]", "[/x]"): print it as written, never as Rich markup.
    console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)


if __name__ == "__main__":
    main()
