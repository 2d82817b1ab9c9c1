"""Reading finished runs: the leaderboard of many (`report`), two runs instance by instance (`compare`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from cli.app import app, console
from tasks_lib.core.errors import InputError


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(
        ...,
        help="Run folders (data/runs/<run_id>); a folder that is not a finished run is named and skipped.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Each run's report.json, as one JSON list."),
    chart: Path | None = typer.Option(None, "--chart", help="Write rates.png and grid.png into this folder."),
    html_dir: Path | None = typer.Option(
        None, "--html", help="Write a static leaderboard page into this folder."
    ),
):
    """Aggregate one or many runs into a leaderboard: models x domains x tiers, failures by kind. Folders that
    are not finished runs (in progress, unfinished, not runs at all) are named on stderr and skipped; exit 2
    when no finished run is left, or a folder given does not exist."""
    from tasks_lib.judge import reporting, run_state

    missing = [str(d) for d in run_dirs if not d.exists()]
    if missing:
        raise InputError(f"no such folder: {', '.join(missing)}")
    run_dirs, skipped = run_state.finished(run_dirs)
    for folder, why in skipped:
        console.print(f"skipped {escape(str(folder))}: {escape(why)}", highlight=False)
    if not run_dirs:
        raise InputError(f"no finished run among the {len(skipped)} folder(s) given")
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
