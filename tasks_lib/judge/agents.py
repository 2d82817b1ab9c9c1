"""An agent command run over a selection: per instance a checkout at the base commit, the command in it, and
what it left there as one prediction.

The predictions file is SWE-bench's JSON Lines (`instance_id`, `model_name_or_path`, `model_patch`), what
`pbench evaluate` reads. Beside it, `<stem>-agent/` holds per instance the statement the agent got, its log, its
patch and `attempt.json`, and `attempts.jsonl`, one row per instance (outcome, exit code, duration, sizes). Both
files are rewritten whole after every instance (a temporary file, then a rename): a crash never leaves half a
line, and the same command run again skips every instance already in the predictions file.

An agent that fails (non-zero exit, the time limit) still leaves a prediction, the diff of its checkout as it
stopped (SWE-agent's autosubmission), and its outcome is recorded; only a checkout the harness could not make
leaves none, so that a rerun tries it again.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tasks_lib.core.constants import AgentOutcome
from tasks_lib.core.errors import InputError, PbenchError
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.formats import patches
from tasks_lib.judge import evaluation, workspace
from tasks_lib.judge.agent_command import Budget, run_command
from tasks_lib.judge.agent_ledger import ATTEMPTS_FILE, Ledger, default_predictions, logs_folder  # noqa: F401 (the batch's files, re-exported)
from tasks_lib.sources import gitops, repos
from tasks_lib.sources.record import SourceRecord

STATEMENT_FILE = "statement.md"


class StatementMode(StrEnum):
    """How the agent gets the problem statement. Always in a file (`PBENCH_STATEMENT_FILE`); with `stdin` also
    on its standard input, with `file` its stdin is empty (an interactive agent reads end of file, not hang)."""

    STDIN = "stdin"
    FILE = "file"


@dataclass(frozen=True)
class AgentJob:
    """One instance to solve, every input resolved by the plan."""

    instance: TaskInstance
    source: SourceRecord  # its era's record: the test-file rules the judge will apply to the patch
    clone: Path
    command: str
    model: str
    budget: Budget
    statement: StatementMode
    folder: Path  # <stem>-agent/<instance_id>/
    keep_checkout: bool = False
    drop_test_edits: bool = False


@dataclass(frozen=True)
class Attempt:
    """What one agent run gave. `patch` None: no prediction (the checkout could not be made)."""

    instance_id: str
    model: str
    outcome: AgentOutcome
    patch: str | None
    exit_code: int | None = None
    duration_s: float = 0.0
    output_bytes: int = 0
    output_truncated: bool = False
    files: tuple[str, ...] = ()  # the paths the patch changes
    dropped: tuple[str, ...] = ()  # test files it changed, left out (`drop_test_edits`)
    problems: tuple[str, ...] = ()  # what the judge will refuse before any container (patch_invalid, ...)
    error: str = ""
    folder: str = ""

    @property
    def prediction(self) -> dict | None:
        if self.patch is None:
            return None
        return {"instance_id": self.instance_id, "model_name_or_path": self.model, "model_patch": self.patch}

    def to_json(self) -> dict:
        return {
            "instance_id": self.instance_id,
            "model": self.model,
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "duration_s": self.duration_s,
            "output_bytes": self.output_bytes,
            "output_truncated": self.output_truncated,
            "predicted": self.patch is not None,
            "patch_bytes": len(patches.patch_bytes(self.patch or "")),
            "files": list(self.files),
            "dropped": list(self.dropped),
            "problems": list(self.problems),
            "error": self.error,
            "folder": self.folder,
        }


def agent_env(job: AgentJob, checkout: Path, statement_file: Path) -> dict[str, str]:
    """The agent's environment: the caller's (its keys, its PATH) and what it is asked to solve."""
    inst = job.instance
    return {
        **os.environ,
        "PBENCH_INSTANCE_ID": inst.instance_id,
        "PBENCH_REPO": inst.repo,
        "PBENCH_BASE_COMMIT": inst.base_commit,
        "PBENCH_STACK_DOMAIN": inst.stack_domain,
        "PBENCH_STATEMENT_FILE": str(statement_file),
        "PBENCH_CHECKOUT": str(checkout),
        "PBENCH_TIMEOUT_S": f"{job.budget.timeout_s:g}",
        "PBENCH_MODEL": job.model,
    }


def attempt(job: AgentJob) -> Attempt:
    """Checkout, agent, diff: one instance, its files under `job.folder` (a previous attempt's replaced)."""
    inst, folder = job.instance, job.folder
    if folder.exists():
        _remove(folder)
    folder.mkdir(parents=True)
    statement_file = folder / STATEMENT_FILE
    statement_file.write_text(inst.problem_statement, encoding="utf-8")
    work = folder / "checkout"
    base = {"instance_id": inst.instance_id, "model": job.model, "folder": str(folder)}
    try:
        made = workspace.checkout(inst, job.clone, work)
    except (PbenchError, OSError) as exc:
        return _save(Attempt(**base, outcome=AgentOutcome.HARNESS_ERROR, patch=None, error=str(exc)))
    try:
        stdin = inst.problem_statement.encode() if job.statement == StatementMode.STDIN else None
        env = agent_env(job, work, statement_file)
        run = run_command(job.command, work, env, stdin, job.budget, folder / "agent.log")
        outcome, error = run.outcome, ""
        try:
            patch = workspace.read_change(work, made.root)
        except PbenchError as exc:
            patch, outcome, error = "", AgentOutcome.DIFF_FAILED, str(exc)
    finally:
        if not job.keep_checkout:
            _remove(work)
    patch, dropped = _without_test_edits(patch, job.source) if job.drop_test_edits else (patch, ())
    return _save(
        Attempt(
            **base,
            outcome=outcome,
            patch=patch,
            exit_code=run.exit_code,
            duration_s=run.duration_s,
            output_bytes=run.output_bytes,
            output_truncated=run.output_truncated,
            files=_files(patch),
            dropped=dropped,
            problems=_problems(patch, job.source),
            error=error,
        )
    )


def _files(patch: str) -> tuple[str, ...]:
    try:
        return tuple(patches.changed_paths(patch))
    except patches.PatchFormatError:
        return ()


def _problems(patch: str, source: SourceRecord) -> tuple[str, ...]:
    return tuple(p.message for p in patches.validate_patch(patch, source))


def _is_test_path(source: SourceRecord, path: str) -> bool:
    return source.is_test_file(path) or source.is_test_infra(path)


def _without_test_edits(patch: str, source: SourceRecord) -> tuple[str, tuple[str, ...]]:
    """The patch minus the blocks of files the judge treats as tests (it refuses a patch that touches them)."""
    try:
        blocks = patches.file_diffs(patch)
    except patches.PatchFormatError:
        return patch, ()
    kept = [fd for fd in blocks if not any(_is_test_path(source, p) for p in fd.paths)]
    dropped = tuple(p for fd in blocks if fd not in kept for p in fd.paths)
    return "".join(fd.text if fd.text.endswith("\n") else fd.text + "\n" for fd in kept), dropped


def _save(done: Attempt) -> Attempt:
    folder = Path(done.folder)
    if done.patch is not None:
        (folder / "model.patch").write_bytes(patches.patch_bytes(done.patch))
    (folder / "attempt.json").write_text(json.dumps(done.to_json(), indent=2) + "\n")
    return done


def _remove(tree: Path) -> None:
    """Remove a folder the agent worked in, also what it made read-only."""

    def writable(func, path, _exc):
        os.chmod(path, stat.S_IRWXU)
        func(path)

    shutil.rmtree(tree, onerror=writable)


# ----------------------------------------------------------------------------- the plan and the batch


@dataclass(frozen=True)
class AgentPlan:
    model: str
    predictions: Path
    folder: Path
    selected: list[str]  # the selection's instance ids, in corpus order
    jobs: dict[str, AgentJob]  # the instances to run, in selection order
    skipped: list[str]  # already in the predictions file
    ledger: Ledger = field(repr=False)


def plan_agents(
    dataset: str,
    command: str,
    model: str,
    out: str | Path | None,
    budget: Budget,
    statement: str = StatementMode.STDIN.value,
    ids: Sequence[str] = (),
    domains: Sequence[str] = (),
    tiers: Sequence[str] = (),
    source: str | None = None,
    mirror: repos.Mirrors = None,
    keep_checkouts: bool = False,
    retry_failed: bool = False,
    drop_test_edits: bool = False,
    for_evaluation: bool = False,
) -> AgentPlan:
    """Everything checked before the first agent starts: the command, the model, the predictions file (JSON
    Lines, of this model), the corpus and the selection, each source's clone holding each base commit. With
    `retry_failed`, instances whose last attempt did not complete run again. `for_evaluation`: the predictions
    file must hold no instance outside the selection (the evaluation of a selection refuses those)."""
    from tasks_lib.corpus import load as corpus

    mode, predictions = _checked(command, model, statement, out)
    folder = logs_folder(predictions)
    instances = corpus.select(corpus.load_corpus(dataset), ids, domains, tiers)
    if not instances:
        raise InputError(f"{dataset}: no instances selected")
    ledger = Ledger(predictions, folder, model)
    selected = [i.instance_id for i in instances]
    outside = sorted(set(ledger.predictions) - set(selected))
    if for_evaluation and outside:
        raise InputError(
            f"--out {predictions}: holds predictions of {len(outside)} instance(s) outside this selection "
            f"({', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''}), which its evaluation would "
            "refuse: select them too, or pass another --out"
        )

    def done(iid: str) -> bool:
        if iid not in ledger.predictions:
            return False
        last = ledger.attempts.get(iid, {}).get("outcome", AgentOutcome.COMPLETED.value)
        return not (retry_failed and last != AgentOutcome.COMPLETED.value)

    todo = [i for i in instances if not done(i.instance_id)]
    clones = _clones(todo, source, mirror)
    jobs = {
        i.instance_id: AgentJob(
            i, *clones[i.instance_id], command, model, budget, mode, folder / i.instance_id,
            keep_checkouts, drop_test_edits,
        )
        for i in todo
    }  # fmt: skip
    skipped = [iid for iid in selected if iid not in jobs]
    return AgentPlan(model, predictions, folder, selected, jobs, skipped, ledger)


def _checked(command: str, model: str, statement: str, out: str | Path | None) -> tuple[StatementMode, Path]:
    """The statement mode and the predictions file's absolute path, or an input error naming the option."""
    if not command.strip():
        raise InputError("--command: empty (the agent's shell command, run in each checkout)")
    if not model.strip():
        raise InputError("--model: empty (the name written as every prediction's model_name_or_path)")
    try:
        mode = StatementMode(statement)
    except ValueError:
        raise InputError(f"--statement: one of stdin, file, got {statement!r}") from None
    predictions = Path(out) if out else default_predictions(model)
    if predictions.suffix != ".jsonl":
        raise InputError(f"--out {predictions}: a .jsonl file (SWE-bench's predictions, one per line)")
    if predictions.is_dir():
        raise InputError(f"--out {predictions}: is a folder, not a predictions file")
    return mode, predictions.absolute()


def _clones(
    instances: list[TaskInstance], source: str | None, mirror: repos.Mirrors
) -> dict[str, tuple[SourceRecord, Path]]:
    """Per instance its era's source record and its source's clone, each clone made (or refreshed) once and
    checked to hold every base commit asked of it: a missing one is refused before any agent runs."""
    from tasks_lib.corpus import load as corpus

    sources = corpus.sources_for(instances, source)
    repos.check_mirrors(mirror, [s.name for s in sources.values()])
    clones: dict[str, Path] = {}
    out = {}
    for inst in instances:
        src = sources[inst.instance_id]
        if src.name not in clones:
            bases = tuple(
                sorted({i.base_commit for i in instances if sources[i.instance_id].name == src.name})
            )
            clones[src.name] = evaluation.repo_for(src, mirror, needs=bases)
        if not gitops.commit_exists(clones[src.name], inst.base_commit):
            raise InputError(
                f"{inst.instance_id}: base commit {inst.base_commit} is not in {src.name}'s clone "
                f"{clones[src.name]} (an older mirror? pass --mirror PATH)"
            )
        out[inst.instance_id] = (src, clones[src.name])
    return out


def run_batch(
    plan: AgentPlan, max_agents: int = 1, on_attempt: Callable[[Attempt, int, int], None] | None = None
) -> dict:
    """Every planned instance through `attempt`, `max_agents` at once, each recorded as it finishes."""
    total, finished = len(plan.jobs), 0
    attempts: list[Attempt] = []
    with ThreadPoolExecutor(max_workers=max(1, max_agents), thread_name_prefix="agent") as pool:
        futures = [pool.submit(attempt, job) for job in plan.jobs.values()]
        try:
            for fut in as_completed(futures):
                done = fut.result()
                plan.ledger.add(done)
                attempts.append(done)
                finished += 1
                if on_attempt is not None:
                    on_attempt(done, finished, total)
        finally:
            for fut in futures:
                fut.cancel()
    return summary(plan, attempts)


def summary(plan: AgentPlan, attempts: Sequence[Attempt]) -> dict:
    """What the batch did: counts per outcome (this run's attempts), the instances skipped, where it all is."""
    counts = Counter(a.outcome.value for a in attempts)
    return {
        "model": plan.model,
        "predictions": str(plan.predictions),
        "logs": str(plan.folder),
        "selected": len(plan.selected),
        "skipped": len(plan.skipped),
        "attempted": len(attempts),
        "by_outcome": dict(sorted(counts.items())),
        "harness_errors": sorted(a.instance_id for a in attempts if a.patch is None),
        "refused_by_judge": sorted(a.instance_id for a in attempts if a.problems),
    }
