"""The evaluation flow: one run per model. Wiring only; scoring lives in tasks_lib.judge.evaluation.

Per-instance verdicts are cached by content (instance, patch hash, image id, harness version) in
tasks_lib.judge.evaluation.VerdictCache, not by Prefect's run-scoped cache: a rerun of the same predictions,
under any run id, starts no container, and a changed patch reruns that instance only.
"""

from __future__ import annotations

from collections import Counter

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from flows import artifacts
from flows.runners import lean_thread_pool, task_runner, windowed, without_heartbeats
from tasks_lib.core import progress, stopping
from tasks_lib.judge import evaluation, run_state, runs


@task(cache_policy=NONE, task_run_name="score {instance_id}")
def score(job: runs.ScoringJob, instance_id: str) -> dict:
    """One planned scoring (`instance_id` names the task run only)."""
    runs.spill(job, runs.score_job(job))
    # Nothing returned: Prefect keeps a copy of the state of every result a task returns until the flow ends
    # (to link results passed to later tasks), and the flow reads the verdict from its file anyway.
    return None


@flow(name="evaluate-model", log_prints=True, task_runner=lean_thread_pool(2))
def evaluate_model(
    dataset: str,
    predictions: str,
    model: str,
    model_cutoff: str,
    run_id: str | None = None,
    ids: list[str] | None = None,
    domains: list[str] | None = None,
    tiers: list[str] | None = None,
    source: str | None = None,
    mirror: str | dict[str, str] | None = None,
    max_workers: int = 2,
    no_cache: bool = False,
    planned: str | None = None,
    run_timeout: float | None = None,
    run_started: float | None = None,
) -> dict:
    """`max_workers` instances at once (each holds one Docker stack), whatever task runner the flow was
    started with: a deployment run scores as the CLI does. `no_cache`: score every instance again, ignoring
    the verdicts cached for the same content (the fresh ones are still cached). `planned`: the folder of a
    run `pbench evaluate` has planned (`runs.load_plan`); the other inputs then only name it. `run_timeout`:
    the run's budget in seconds from `run_started` (POSIX time; default: the flow's start), `run_state.Budget`."""
    stopping.chain_sigterm()  # SIGTERM reaches the worker threads too: a stop within seconds
    budget = run_state.Budget(run_timeout, run_started)
    if planned:
        plan = runs.load_plan(planned)
    else:  # a deployment run: planned here, once
        plan = runs.plan_run(
            dataset, predictions, model, model_cutoff, run_id, ids or (), domains or (), tiers or (), source,
            mirror, no_cache=no_cache,
        )  # fmt: skip
    skipped = runs.missing(plan)
    todo = runs.schedule(plan)  # longest expected first
    by_id = {i.instance_id: i for i in plan.instances}
    # Rows go to disk as verdicts arrive and only counts stay here: the flow's memory does not grow with the
    # run (docs/performance.md, section 5).
    writer = runs.run_writer(plan)
    counts: Counter[str] = Counter()
    total, done = len(plan.instances), 0

    def record(v: evaluation.Verdict) -> None:
        nonlocal done
        runs.add_verdict(writer, plan, by_id[v.instance_id], v)
        counts[v.kind] += 1
        done += 1
        print(runs.progress_line(done, total, v, counts))
        progress.notify(v, counts, total)

    for instance in skipped:  # no container: unresolved, in the denominator
        record(runs.no_prediction(instance))
    ahead = runs.Ahead(plan, todo, max_workers)  # the next instance's run made while one is scored

    def submit(instance_id: str):
        fut = score.submit(plan.jobs[instance_id], instance_id)
        ahead.after(instance_id)
        return fut

    try:
        for instance_id, fut in windowed(budget.admit(todo), submit, max_workers):
            fut.result()  # raises what the task raised
            record(runs.unspill(runs.verdict_path(plan, instance_id)))
    finally:
        ahead.close()
    if budget.left:
        return _unfinished(plan, writer, budget)
    report = runs.finish_writer(writer, plan)
    _publish(plan, report)
    report["out_dir"] = str(plan.out_dir)
    return report


def _unfinished(plan: runs.RunPlan, writer, budget: run_state.Budget) -> dict:
    """A run its budget cut short: no tables, no report; the instances never started in unfinished.json."""
    writer.abandon()
    total = len(plan.instances)
    left = run_state.write_unfinished(plan.out_dir, plan.run_id, total, budget.left, budget.reason())
    print(f"{budget.reason()}: {len(budget.left)} of {total} instance(s) never started ({plan.out_dir})")
    return {**left, "out_dir": str(plan.out_dir)}


def _publish(plan: runs.RunPlan, report: dict) -> None:
    """The run's report and tables as Prefect artifacts, linked to its Parquet outputs."""
    create_markdown_artifact(
        key=artifacts.key(f"report-{plan.run_id}"),
        markdown="```\n" + (plan.out_dir / "report.txt").read_text() + "```\n",
        description=f"Evaluation report of {plan.model} (run {plan.run_id})",
    )
    create_table_artifact(
        key=artifacts.key(f"results-{plan.run_id}"),
        table=[{"instance": k, "status": v} for k, v in report["instances"].items()],
        description=f"Parquet: {plan.out_dir / 'results.parquet'}, {plan.out_dir / 'tests.parquet'}",
    )
    _publish_charts(plan)
    artifacts.link_outputs(
        f"run-{plan.run_id}",
        [plan.out_dir / "results.parquet", plan.out_dir / "tests.parquet", plan.out_dir / "report.json"],
        f"run {plan.run_id}",
    )


def _publish_charts(plan: runs.RunPlan) -> None:
    """The run's charts, written under the run folder (`runs.write_charts`) and shown in the Prefect UI."""
    charts = runs.write_charts(plan)
    if not charts:
        return
    create_markdown_artifact(
        key=artifacts.key(f"charts-{plan.run_id}"),
        markdown=f"# {plan.model}, run {plan.run_id}"
        + "".join(artifacts.inline_png(p, p.stem) for p in charts),
        description=f"Charts of run {plan.run_id}: {plan.out_dir / 'charts'}",
    )


def run_evaluation(
    max_workers: int = 2, dask_address: str | None = None, dask_workers: int | None = None, **kwargs
) -> dict:
    runner = task_runner(max_workers, dask_address, dask_workers)
    if dask_address or dask_workers:  # the cluster's size decides
        max_workers = dask_workers or 1_000_000
    with without_heartbeats():
        return evaluate_model.with_options(task_runner=runner)(max_workers=max_workers, **kwargs)
