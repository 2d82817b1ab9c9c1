"""Evaluation: score one patch, evaluate a model, the harness self-test, the demo."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import typer
from rich.markup import escape

from cli.app import (
    SpacedLists,
    app,
    console,
    dataset_option,
    ids_option,
    live_bar,
    max_workers_option,
    prefect,
    prefect_ready,
)
from cli.corpus import _instance, curate
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError

NO_CACHE_HELP = "Score again, ignoring the verdicts cached for the same content (the fresh ones are cached)."
RUN_TIMEOUT_HELP = (
    "Wall-clock budget of the whole run, in seconds: once spent, no further instance starts (those running "
    "finish); the others are written to unfinished.json and the command exits 2; rerunning it scores them. "
    "Each instance's own budget is its source's timeout_s per side."
)


@app.command()
def score(
    instance_id: str = typer.Argument(...),
    patch: str = typer.Option(..., help="A unified diff file, or the specials 'gold' / 'empty'."),
    out: Path | None = typer.Option(
        None, help="Folder for verdict.json and the trace (default: data/scores/<id>-<patch hash>)."
    ),
    dataset: str = dataset_option(),
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
    # Beside data/runs/, never in it: a folder there is a run (`pbench report data/runs/*/`, `--run-id`).
    out = out or paths.scores_dir() / f"{instance_id}-{prediction.patch_sha256[:12]}"
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
    run_timeout=None,
) -> dict:
    from tasks_lib.judge import run_state

    if run_timeout is not None and dask_address:
        raise InputError(
            "--run-timeout: not with --dask-address (every instance goes to the cluster at once, so none "
            "would be held back); use --dask-workers N or the threads of --max-workers"
        )
    budget = run_state.Budget(run_timeout)  # the whole command's: planning and Prefect's start count too
    plan = _plan(
        dataset, predictions, model, model_cutoff, run_id, ids, domains, tiers, source, mirror, no_cache
    )
    report = _answered_from_cache(plan)
    if report is not None:
        return report
    prefect()
    from flows import evaluation as eval_flow
    from tasks_lib.core import progress

    prefect_ready()

    with _verdict_progress(model, len(plan.instances)) as on_verdict:
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
                run_timeout=budget.seconds,
                run_started=budget.started,
            )
        finally:
            progress.CALLBACKS.remove(on_verdict)


def _plan(dataset, predictions, model, model_cutoff, run_id, ids, domains, tiers, source, mirror, no_cache):
    """Bad input (corpus, predictions, model, cutoff, run folder) is refused before Prefect starts: inside a
    flow run the refusal would come after a server start-up, logged with a traceback."""
    from tasks_lib.judge import runs
    from tasks_lib.sources import repos

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
    if plan.outside_selection:
        console.print(
            f"{plan.outside_selection} prediction(s) of instances outside the selection: counted, not scored "
            "(run.json: predictions_outside_selection)",
            highlight=False,
        )
    return plan


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
def _verdict_progress(model: str, total: int, out=None):
    """A live bar on a terminal, its total the plan's from the start; elsewhere (CI logs, pipes) nothing more
    than the flow's own line per verdict."""

    def counts_text(counts) -> str:
        return f"resolved {counts['resolved']} · failed {counts['failed']} · errored {counts['errored']}"

    progress_bar = live_bar("{task.fields[counts]}", out or console)
    if progress_bar is None:
        yield lambda *_: None
        return
    with progress_bar as bar:
        job = bar.add_task(escape(model), total=total, counts="")

        def on_bar(v, counts, total):
            bar.update(job, total=total, advance=1, counts=counts_text(counts))

        yield on_bar


@app.command(cls=SpacedLists)
def evaluate(
    predictions: str = typer.Option(
        ...,
        "--predictions",
        "-p",
        "--predictions_path",
        help="Predictions file (JSONL/JSON), or 'gold' / 'empty'. It may hold instances outside the "
        "selection: they are counted, not scored.",
    ),
    model: str = typer.Option(..., help="Model id (stored with the run)."),
    model_cutoff: str = typer.Option(..., help="The model's disclosed training cutoff, YYYY-MM-DD."),
    run_id: str | None = typer.Option(
        None,
        "--run-id",
        "-id",
        "--run_id",
        help="Run folder name (default: model + predictions hash).",
    ),
    max_workers: int = max_workers_option(),
    dataset: str = dataset_option(),
    ids: list[str] = ids_option(),
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
    run_timeout: float | None = typer.Option(None, "--run-timeout", min=0, help=RUN_TIMEOUT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print report.json instead of the text table."),
    no_cache: bool = typer.Option(False, "--no-cache", help=NO_CACHE_HELP),
):
    """Evaluate one model's predictions: data/runs/<run_id>/ with Parquet results and a report. Exit 0 when
    the run is written (whatever it resolved), 2 when it could not run or its budget left instances unscored."""
    report = _evaluate(
        dataset, predictions, model, model_cutoff, run_id, max_workers, ids, domain, tier, source, mirror,
        dask_address=dask_address, dask_workers=dask_workers, no_cache=no_cache, run_timeout=run_timeout,
    )  # fmt: skip
    if "unfinished_ids" in report:
        _unfinished(report, as_json)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    typer.echo((Path(report["out_dir"]) / "report.txt").read_text())


def _unfinished(left: dict, as_json: bool) -> None:
    """A run its budget cut short: what was scored, what was not, how to finish it; exit 2 (no report)."""
    if as_json:
        typer.echo(json.dumps(left, indent=2, default=str))
    ids = left["unfinished_ids"]
    console.print(
        f"[yellow]unfinished[/yellow]: {escape(left['reason'])}; {left['scored']} of {left['total']} instance(s) "
        f"scored, {len(ids)} never started ({escape(', '.join(ids[:5]))}{', ...' if len(ids) > 5 else ''}), "
        f"recorded in {escape(str(Path(left['out_dir']) / 'unfinished.json'))}. No report yet: rerun the same "
        "command to score them (the scored ones come back from the verdict cache, without a container)",
        highlight=False,
    )
    raise typer.Exit(ExitCode.HARNESS_ERROR)


@app.command(cls=SpacedLists)
def validate(
    dataset: str = dataset_option(),
    max_workers: int = max_workers_option(),
    ids: list[str] = ids_option(),
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
    """Harness self-test: `gold` must resolve every instance and `empty` none. Exit 0 when both hold, 1 when an
    instance breaks either (each named with its trace), 2 when the harness could not run (bad input,
    infrastructure)."""
    if repo:
        ids = [*ids, *_ids_of_repos(dataset, repo)]
    problems, harness_errors = [], 0
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
        harness_errors += len(rep["error_ids"])
        for iid, status in rep["instances"].items():
            if (status == "resolved") != want:
                problems.append(f"{special}: {iid} is {status} (trace: {out / 'logs' / iid})")
    if problems:
        console.print("[red]self-test failed[/red]:\n  " + "\n  ".join(problems), highlight=False)
        # An instance the harness could not grade says nothing about the self-test's rule: exit 2, not 1.
        raise typer.Exit(ExitCode.HARNESS_ERROR if harness_errors else ExitCode.NOT_RESOLVED)
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
        refresh=[],
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
