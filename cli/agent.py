"""Agents: an instance's starting tree (`pbench checkout`), an agent command run over a selection whose diffs
become predictions (`pbench agent run`, with `--evaluate` straight into `pbench evaluate`), and the diff of a
checkout (`pbench agent diff`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape

from cli.app import DATASET_HELP, DEFAULT_DATASET, app, console
from cli.corpus import _instance
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError

agent_app = typer.Typer(
    no_args_is_help=True, help="Run an agent over a selection: checkouts in, predictions out."
)
app.add_typer(agent_app, name="agent")

DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_MAX_OUTPUT_BYTES = 10_000_000


@app.command()
def checkout(
    instance_id: str = typer.Argument(...),
    dest: Path = typer.Argument(..., help="A new or empty folder."),
    dataset: str = typer.Option(DEFAULT_DATASET, help=DATASET_HELP),
    source: str | None = typer.Option(None, help="Source record (default: by the instance's repo)."),
    mirror: Path | None = typer.Option(None, help="Local mirror of the source repository."),
    statement_file: Path | None = typer.Option(
        None, help="Also write the problem statement to this file (outside DEST: it would be in the diff)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print what was checked out as JSON."),
):
    """The agent's starting tree: the repository at the instance's base commit, as a new git repository of one
    commit (no history, no remote, never the hidden tests), status clean. The prediction is then
    `git add -A && git diff --cached --binary pbench-base` (or `pbench agent diff DEST`)."""
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation, workspace

    inst = _instance(dataset, instance_id)
    dest = dest.absolute()
    workspace.refuse_non_empty(dest)
    if statement_file is not None and statement_file.absolute().is_relative_to(dest):
        raise InputError(f"--statement-file {statement_file}: inside {dest}, it would be part of the diff")
    src = corpus.source_for(inst, source)
    clone = evaluation.repo_for(src, mirror, needs=(inst.base_commit,))
    made = workspace.checkout(inst, clone, dest)
    if statement_file is not None:
        statement_file.parent.mkdir(parents=True, exist_ok=True)
        statement_file.write_text(inst.problem_statement, encoding="utf-8")
    if as_json:
        typer.echo(json.dumps({**made.to_json(), "statement_file": str(statement_file or "")}, indent=2))
        return
    console.print(
        f"{escape(str(dest))}: {escape(inst.repo)} at {inst.base_commit} (one commit {made.root[:12]}, "
        f"tag {workspace.BASE_TAG}{', the same tree' if made.same_tree else ''})",
        highlight=False,
    )
    if made.stubbed_files:
        console.print(
            f"[yellow]{len(made.stubbed_files)} file(s) written empty[/yellow]: the mirror lacks their blobs "
            f"(as in the harness's own snapshot): {escape(', '.join(made.stubbed_files[:5]))}",
            highlight=False,
        )
    if statement_file is not None:
        console.print(f"statement: {escape(str(statement_file))}", highlight=False)


@agent_app.command("diff")
def diff_cmd(checkout_dir: Path = typer.Argument(..., help="A folder made by `pbench checkout`.")):
    """The checkout's change as the prediction `pbench agent run` would take: every edit, new and deleted
    file against the base (committed or not), what .gitignore leaves out left out. On stdout, as bytes."""
    from tasks_lib.formats.patches import patch_bytes
    from tasks_lib.judge import workspace

    made = workspace.read_marker(checkout_dir)
    sys.stdout.buffer.write(patch_bytes(workspace.read_change(checkout_dir, made.root)))
    sys.stdout.flush()


@agent_app.command("run")
def run(
    command: str = typer.Option(
        ..., "--command", "-c", help="The agent's shell command, run in each checkout."
    ),
    model: str = typer.Option(
        ..., "--model", "--model-name", help="Written as every prediction's model_name_or_path."
    ),
    out: Path | None = typer.Option(
        None,
        help="Predictions file, .jsonl (default data/agents/MODEL/predictions.jsonl); logs in <stem>-agent/.",
    ),
    dataset: str = typer.Option(DEFAULT_DATASET, help=DATASET_HELP),
    ids: list[str] = typer.Option([], "--id", help="Only these instance ids."),
    domain: list[str] = typer.Option([], help="Only these stack domains."),
    tier: list[str] = typer.Option([], help="Only these contamination tiers."),
    source: str | None = typer.Option(None, help="Source record (default: by each instance's repo)."),
    mirror: list[str] = typer.Option(
        [],
        help="Local mirror of the source repository: PATH, or SOURCE=PATH once per source of the selection.",
    ),
    timeout_s: float = typer.Option(
        DEFAULT_TIMEOUT_S, min=0.001, help="Wall-clock limit per instance; then its process group is killed."
    ),
    max_output_bytes: int = typer.Option(
        DEFAULT_MAX_OUTPUT_BYTES, min=0, help="Cap of the agent's log per instance (stdout and stderr)."
    ),
    statement: str = typer.Option(
        "stdin", help="stdin: the statement on stdin and in $PBENCH_STATEMENT_FILE; file: only in the file."
    ),
    max_agents: int = typer.Option(1, min=1, help="Agents running at once."),
    keep_checkouts: bool = typer.Option(False, help="Keep each checkout (<stem>-agent/ID/checkout)."),
    retry_failed: bool = typer.Option(
        False, help="Run again the instances whose last attempt did not complete (failed, timeout, ...)."
    ),
    drop_test_edits: bool = typer.Option(
        False,
        help="Leave out of each diff the test files it changes (the judge refuses a patch touching tests).",
    ),
    evaluate_after: bool = typer.Option(
        False, "--evaluate", help="Then evaluate the predictions (`pbench evaluate`)."
    ),
    model_cutoff: str | None = typer.Option(
        None, help="With --evaluate: the model's training cutoff, YYYY-MM-DD."
    ),
    run_id: str | None = typer.Option(None, help="With --evaluate: the run folder's name."),
    max_workers: int = typer.Option(2, min=1, help="With --evaluate: instances scored in parallel."),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="With --evaluate: score again, ignoring cached verdicts."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the batch's summary (and the report) as JSON."),
):
    """Run an agent command over a selection: per instance a checkout at the base commit as its working
    directory, the statement on stdin (and in $PBENCH_STATEMENT_FILE), a time and output budget; then its diff
    as a SWE-bench prediction. Instances already in --out are skipped (a rerun resumes). With --evaluate, the
    predictions go straight through `pbench evaluate` and its report is printed."""
    from tasks_lib.judge import agents
    from tasks_lib.judge.agent_command import Budget
    from tasks_lib.sources import repos

    if evaluate_after:
        from tasks_lib.corpus import tiering

        if tiering.parse_date(model_cutoff, "--model-cutoff") is None:
            raise InputError("--evaluate: needs --model-cutoff YYYY-MM-DD (the model's training cutoff)")
    elif model_cutoff or run_id or no_cache:
        raise InputError("--model-cutoff, --run-id and --no-cache go with --evaluate")
    plan = agents.plan_agents(
        dataset, command, model, out, Budget(timeout_s, max_output_bytes), statement, ids, domain, tier, source,
        repos.parse_mirrors(mirror), keep_checkouts=keep_checkouts, retry_failed=retry_failed,
        drop_test_edits=drop_test_edits, for_evaluation=evaluate_after,
    )  # fmt: skip
    summary = _batch(plan, max_agents, evaluate_after, as_json)
    if not evaluate_after:
        if as_json:
            typer.echo(json.dumps({"agents": summary}, indent=2))
        return
    from cli.evaluate import _evaluate

    report = _evaluate(
        dataset, str(plan.predictions), model, model_cutoff, run_id, max_workers, ids, domain, tier,
        source, mirror, no_cache=no_cache,
    )  # fmt: skip
    if as_json:
        typer.echo(json.dumps({"agents": summary, "report": report}, indent=2, default=str))
        return
    typer.echo((Path(report["out_dir"]) / "report.txt").read_text())


def _batch(plan, max_agents: int, evaluate_after: bool, as_json: bool) -> dict:
    """The batch, a line per instance; exit 2 when a checkout could not be made (nothing is evaluated then: the
    instances without a prediction would count as unresolved)."""
    from tasks_lib.judge import agents

    if plan.skipped:
        console.print(
            f"{len(plan.skipped)} instance(s) already in {escape(str(plan.predictions))}: skipped",
            highlight=False,
        )
    summary = agents.run_batch(plan, max_agents, _print_attempt)
    console.print(_summary_line(summary), highlight=False)
    if summary["harness_errors"]:
        console.print(
            f"[red]error:[/red] {len(summary['harness_errors'])} instance(s) without a prediction, their "
            f"checkout could not be made ({escape(', '.join(summary['harness_errors']))}; "
            f"{escape(str(plan.folder / agents.ATTEMPTS_FILE))}): rerun the same command to retry them"
            + ("; not evaluated" if evaluate_after else ""),
            highlight=False,
        )
        if as_json:
            typer.echo(json.dumps({"agents": summary}, indent=2))
        raise typer.Exit(ExitCode.HARNESS_ERROR)
    return summary


def _print_attempt(done, finished: int, total: int) -> None:
    color = {"completed": "green", "harness_error": "red"}.get(done.outcome.value, "yellow")
    exit_text = "" if done.exit_code is None else f"exit {done.exit_code}  "
    console.print(
        f"[{finished}/{total}] {escape(done.instance_id)}  [{color}]{done.outcome.value}[/{color}]  {exit_text}"
        f"{done.duration_s:.1f} s  {len(done.files)} file(s)  -> {escape(done.folder)}",
        highlight=False,
    )
    notes = [f"the judge will refuse it: {p}" for p in done.problems[:3]]
    notes += [f"test files left out: {', '.join(done.dropped)}"] if done.dropped else []
    notes += ["output over the cap: the rest of it dropped from agent.log"] if done.output_truncated else []
    notes += [done.error] if done.error else []
    for note in notes:
        console.print(f"    {escape(note)}", highlight=False)


def _summary_line(summary: dict) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in summary["by_outcome"].items()) or "nothing to run"
    return (
        f"{summary['model']}: {summary['attempted']} of {summary['selected']} instance(s) run ({counts}), "
        f"{summary['skipped']} skipped -> {summary['predictions']} (logs: {summary['logs']})"
    )
