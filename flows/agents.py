"""The agent-run flow: an agent command over a selection (checkout, agent, diff per instance), its predictions,
then on request their evaluation as a subflow run of `evaluate-model`. Wiring only: the work is
tasks_lib.judge.agents, the same functions `pbench agent run` calls.
"""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NONE

from flows.evaluation import evaluate_model
from flows.runners import lean_thread_pool, windowed
from tasks_lib.core import stopping
from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.judge import agents
from tasks_lib.judge.agent_command import Budget


@task(cache_policy=NONE, task_run_name="agent {instance_id}")
def solve(job: agents.AgentJob, instance_id: str) -> agents.Attempt:
    """One instance: checkout, the agent command, its diff (never cached: an agent is not a function of its
    inputs, and a rerun of the flow skips what the predictions file holds)."""
    return agents.attempt(job)


@flow(name="agent-run", log_prints=True, task_runner=lean_thread_pool(2))
def agent_run(
    command: str,
    model: str,
    dataset: str = "demo",
    predictions: str | None = None,
    ids: list[str] | None = None,
    domains: list[str] | None = None,
    tiers: list[str] | None = None,
    source: str | None = None,
    mirror: str | dict[str, str] | None = None,
    timeout_s: float = 1800.0,
    max_output_bytes: int = 10_000_000,
    statement: str = "stdin",
    max_agents: int = 1,
    keep_checkouts: bool = False,
    retry_failed: bool = False,
    drop_test_edits: bool = False,
    evaluate: bool = False,
    model_cutoff: str | None = None,
    run_id: str | None = None,
    max_workers: int = 2,
    no_cache: bool = False,
) -> dict:
    """`pbench agent run` as a deployment: the same plan, attempts and predictions file (`predictions`, by
    default data/agents/<model>/predictions.jsonl); with `evaluate`, the evaluation of the selection."""
    stopping.chain_sigterm()
    if evaluate and not model_cutoff:
        raise InputError("evaluate: needs model_cutoff (YYYY-MM-DD, the model's training cutoff)")
    try:
        budget = Budget(timeout_s, max_output_bytes)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    plan = agents.plan_agents(
        dataset, command, model, predictions, budget, statement, ids or (), domains or (), tiers or (), source,
        mirror, keep_checkouts=keep_checkouts, retry_failed=retry_failed, drop_test_edits=drop_test_edits,
        for_evaluation=evaluate,
    )  # fmt: skip
    attempts = _solve_all(plan, max_agents)
    summary = agents.summary(plan, attempts)
    if summary["harness_errors"]:
        raise PbenchError(
            f"{len(summary['harness_errors'])} checkout(s) could not be made: {summary['harness_errors']} "
            f"(see {plan.folder / agents.ATTEMPTS_FILE}); run again to retry them"
        )
    if not evaluate:
        return {"agents": summary}
    report = evaluate_model(
        dataset=dataset, predictions=str(plan.predictions), model=model, model_cutoff=model_cutoff, run_id=run_id,
        ids=ids, domains=domains, tiers=tiers, source=source, mirror=mirror, max_workers=max_workers,
        no_cache=no_cache,
    )  # fmt: skip
    return {"agents": summary, "report": report}


def _solve_all(plan: agents.AgentPlan, max_agents: int) -> list[agents.Attempt]:
    """Every planned instance, `max_agents` at once, each recorded in the predictions file as it finishes."""
    print(f"{len(plan.jobs)} instance(s) to run, {len(plan.skipped)} already in {plan.predictions}")
    attempts = []
    for instance_id, fut in windowed(
        plan.jobs, lambda instance_id: solve.submit(plan.jobs[instance_id], instance_id), max_agents
    ):
        done = fut.result()
        plan.ledger.add(done)
        attempts.append(done)
        print(
            f"[{len(attempts)}/{len(plan.jobs)}] {instance_id} {done.outcome.value} "
            f"exit {done.exit_code} {done.duration_s:.1f} s, {len(done.files)} file(s)"
        )
    return attempts
