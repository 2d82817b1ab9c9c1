"""Evaluation: score one patch, evaluate a model, report, the harness self-test, the demo."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer
from rich.markup import escape

from cli.app import DATASET_HELP, DEFAULT_DATASET, app, console, live_bar, prefect
from cli.corpus import _instance, curate
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError

NO_CACHE_HELP = "Score again, ignoring the verdicts cached for the same content (the fresh ones are cached)."


@app.command()
def score(
    instance_id: str = typer.Argument(...),
    patch: str = typer.Option(..., help="A unified diff file, or the specials 'gold' / 'empty'."),
    out: Path | None = typer.Option(None, help="Folder for verdict.json and the trace."),
    dataset: str = typer.Option(DEFAULT_DATASET, help=DATASET_HELP),
    source: str | None = typer.Option(None, help="Source record (default: by the instance's repo)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON (same exit codes)."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
):
    """Score one patch: exit 0 resolved, 1 not resolved, 2 the harness could not run."""
    from tasks_lib.core import paths
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation
    from tasks_lib.judge.predictions import Prediction, PredictionFormat

    inst = _instance(dataset, instance_id)
    if patch in ("gold", "empty"):
        text, fmt = (inst.patch if patch == "gold" else ""), PredictionFormat(patch)
    else:
        p = Path(patch)
        if not p.is_file():
            raise InputError(f"--patch {patch}: no such file (or use 'gold' / 'empty')")
        # Bytes as written: no newline translation (a CRLF file's patch keeps its CRs), no decoding error.
        text, fmt = p.read_bytes().decode("utf-8", errors="surrogateescape"), PredictionFormat.DIFF
    prediction = Prediction(instance_id, "cli", text, fmt)
    src = corpus.source_for(inst, source)
    repo = evaluation.repo_for(src, mirror, needs=(inst.base_commit,))
    out = out or paths.runs_dir() / "score" / f"{instance_id}-{prediction.patch_sha256[:12]}"
    cache = evaluation.VerdictCache(refresh=no_cache)
    verdict = evaluation.score_instance(inst, prediction, src, repo, out / "logs", cache=cache)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(verdict.to_json(), indent=2))
    color = "green" if verdict.resolved else ("red" if not verdict.infra_failure else "yellow")
    if as_json:
        typer.echo(json.dumps({**verdict.to_json(), "out": str(out)}, default=str))
    else:
        console.print(
            f"[{color}]{verdict.status}[/{color}]  F2P {verdict.f2p_passed}/{verdict.f2p_total}  "
            f"P2P {verdict.p2p_passed}/{verdict.p2p_total}  {escape(verdict.note)}  ->  {escape(str(out))}",
            highlight=False,
        )
    # A patch that is not a diff is malformed input, like infrastructure trouble: the harness could not run.
    if verdict.status == "patch_invalid" or verdict.infra_failure:
        raise typer.Exit(ExitCode.HARNESS_ERROR)
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
    no_cache=False,
) -> dict:
    from tasks_lib.judge import runs
    from tasks_lib.sources import repos

    # Bad input (corpus, predictions, model, cutoff, run folder) is refused before Prefect starts: inside
    # a flow run the refusal would come after a server start-up, logged with a traceback.
    plan = runs.plan_run(
        dataset,
        predictions,
        model,
        model_cutoff,
        run_id,
        ids=ids,
        domains=domains,
        tiers=tiers,
        source=source,
        mirror=repos.parse_mirrors(mirror or ()),
        no_cache=no_cache,
    )
    report = _answered_from_cache(plan)
    if report is not None:
        return report
    prefect()
    from flows import evaluation as eval_flow
    from tasks_lib.core import progress

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
                run_id=plan.run_id,
                planned=str(plan.out_dir),  # planned once, above: the flow loads it
            )
        finally:
            progress.CALLBACKS.remove(on_verdict)


def _answered_from_cache(plan) -> dict | None:
    """A run whose every verdict is already known (a rerun of the same predictions, under any run id) is
    answered before Prefect starts: no server, no flow run, the same tables and report (docs/performance.md).
    Not the charts, which the flow draws for its Prefect artifact: drawing them is most of such a command
    (matplotlib, ~4 s here); `pbench report RUN --chart DIR` draws them from the same results."""
    from tasks_lib.judge import runs

    cached = runs.answer_from_cache(plan)
    if cached is None:
        return None
    report = runs.finish_run(plan, cached)
    console.print(
        f"{len(cached)} instance(s), every verdict already known (verdict cache): no container, "
        "Prefect not started",
        highlight=False,
    )
    report["out_dir"] = str(plan.out_dir)
    return report


@contextlib.contextmanager
def _verdict_progress(model: str):
    """A live bar on a terminal; elsewhere (CI logs, pipes) nothing more than the flow's own line per verdict."""

    def counts_text(counts) -> str:
        return f"resolved {counts['resolved']} · failed {counts['failed']} · errored {counts['errored']}"

    progress_bar = live_bar("{task.fields[counts]}", console)
    if progress_bar is None:
        yield lambda *_: None
        return
    with progress_bar as bar:
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
    dataset: str = typer.Option(DEFAULT_DATASET, help=DATASET_HELP),
    ids: list[str] = typer.Option([], "--id", help="Only these instance ids."),
    domain: list[str] = typer.Option([], help="Only these stack domains."),
    tier: list[str] = typer.Option([], help="Only these contamination tiers."),
    source: str | None = typer.Option(None, help="Source record (default: by each instance's repo)."),
    mirror: list[str] = typer.Option(
        [],
        help="Local mirror of the source repository: PATH, or SOURCE=PATH once per source of the selection.",
    ),
    dask_address: str | None = typer.Option(
        None, help="Run the fan-out on this Dask scheduler (tcp://host:8786)."
    ),
    dask_workers: int | None = typer.Option(
        None, help="Run the fan-out on a local Dask cluster of N workers."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print report.json instead of the text table."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
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
        no_cache=no_cache,
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    typer.echo((Path(report["out_dir"]) / "report.txt").read_text())


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders (data/runs/<run_id>)."),
    as_json: bool = typer.Option(False, "--json", help="Each run's report.json, as one JSON list."),
    chart: Path | None = typer.Option(None, "--chart", help="Write rates.png and grid.png into this folder."),
    html_dir: Path | None = typer.Option(
        None, "--html", help="Write a static leaderboard page into this folder."
    ),
):
    """Aggregate one or many runs into a leaderboard: models x domains x tiers, failures by kind."""
    from tasks_lib.judge import reporting

    if chart or html_dir:
        from tasks_lib.judge import leaderboard

        df = reporting.load_results(run_dirs)
        for path in leaderboard.write_charts(df, chart) if chart else []:
            console.print(f"chart: {path}", highlight=False)
        if html_dir:
            console.print(f"leaderboard page: {leaderboard.write_html(df, html_dir)}", highlight=False)
    if as_json:
        typer.echo(json.dumps(reporting.run_reports(run_dirs), indent=2, default=str))
        return
    typer.echo(reporting.leaderboard(run_dirs))


@app.command()
def compare(
    run_a: Path = typer.Argument(..., help="The first run folder (data/runs/<run_id>): the baseline."),
    run_b: Path = typer.Argument(..., help="The second run folder, over the same selection."),
    as_json: bool = typer.Option(False, "--json", help="The comparison as JSON."),
):
    """Two runs of one selection, instance by instance: the flips each way, McNemar's exact test and a
    bootstrap interval of the score difference, each score with its 95 % interval. Runs over different
    instances, or different tasks under the same ids, are refused (exit 2), naming the difference."""
    from tasks_lib.judge import compare as comparing

    name_a, a = comparing.read_run(run_a)
    name_b, b = comparing.read_run(run_b)
    if name_a == name_b:
        name_a, name_b = str(run_a), str(run_b)
    tasks = (comparing.read_tasks(run_a), comparing.read_tasks(run_b))
    result = comparing.compare(a, b, (name_a, name_b), tasks)
    typer.echo(json.dumps(result, indent=2) if as_json else comparing.text(result))


@app.command()
def validate(
    dataset: str = typer.Option(DEFAULT_DATASET, help=DATASET_HELP),
    max_workers: int = typer.Option(2, min=1),
    ids: list[str] = typer.Option([], "--id", help="Only these instance ids."),
    domain: list[str] = typer.Option([], help="Only these stack domains."),
    tier: list[str] = typer.Option([], help="Only these contamination tiers."),
    repo: list[str] = typer.Option([], help="Only the instances of these repositories (owner/name)."),
    source: str | None = typer.Option(None, help="Source record (default: by each instance's repo)."),
    mirror: list[str] = typer.Option(
        [],
        help="Local mirror of the source repository: PATH, or SOURCE=PATH once per source of the selection.",
    ),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
):
    """Harness self-test: `gold` must resolve every instance and `empty` none. Exit 1 on any exception."""
    if repo:
        ids = [*ids, *_ids_of_repos(dataset, repo)]
    problems = []
    for special, want in (("gold", True), ("empty", False)):
        rep = _evaluate(
            dataset,
            special,
            f"self-test-{special}",
            "1970-01-01",
            None,
            max_workers,
            ids,
            domain,
            tier,
            source=source,
            mirror=mirror,
            no_cache=no_cache,
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


def _ids_of_repos(dataset: str, repos: list[str]) -> list[str]:
    """The instance ids of a corpus whose repository is one of `repos` (each must have one at least)."""
    from tasks_lib.corpus import load as corpus

    instances = corpus.load_corpus(dataset)
    missing = [r for r in repos if not any(i["repo"] == r for i in instances)]
    if missing:
        known = sorted({i["repo"] for i in instances})
        raise InputError(f"--repo: no instance of {missing} in {dataset!r} (its repositories: {known})")
    return [i["instance_id"] for i in instances if i["repo"] in repos]


@app.command()
def demo(max_workers: int = typer.Option(2, min=1)):
    """The main job on the embedded demo source: curation season `demo`, then gold/empty evaluation."""
    curate(
        season="demo",
        source=[],
        crawl=None,
        prs_file=None,
        mirror=None,
        limit=None,
        until=None,
        max_concurrency=None,
    )
    validate(
        dataset="demo",
        max_workers=max_workers,
        ids=[],
        domain=[],
        tier=[],
        repo=[],
        source=None,
        mirror=None,
        no_cache=False,
    )
