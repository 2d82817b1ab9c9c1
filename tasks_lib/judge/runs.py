"""A whole evaluation run: what is checked before any container (corpus, predictions, model, cutoff, run folder),
the scoring of each planned instance, and the run's outputs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import HARNESS_VERSION, JUDGE_VERSION
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.judge import evaluation
from tasks_lib.judge.evaluation import Verdict
from tasks_lib.judge.predictions import Prediction
from tasks_lib.judge.run_state import JOBS_FILE, VERDICT_FILE, claim_folder, write_meta
from tasks_lib.sources import gitops, repos
from tasks_lib.sources.record import SourceRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScoringJob:
    """One planned scoring, every input resolved once by the plan: the instance, its prediction, the source
    record of its era, the source's clone and the trace folder. What a scoring task receives (never the whole
    plan); written beside run.json (`scoring-jobs.jsonl`), from which the flow loads it."""

    instance: TaskInstance
    prediction: Prediction
    source: SourceRecord
    repo: Path
    trace: Path
    no_cache: bool = False

    @property
    def instance_id(self) -> str:
        return self.instance.instance_id


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    model: str
    model_cutoff: str
    out_dir: Path
    instances: list[TaskInstance]
    predictions: dict[str, Prediction]
    # Ignore the verdicts cached for this content (score again), still writing the fresh ones.
    no_cache: bool = False
    # One per instance with a prediction, in the plan's order (`ScoringJob`).
    jobs: dict[str, ScoringJob] = field(default_factory=dict)
    # Entries of the predictions for instances of the corpus outside the selection: counted, not scored.
    outside_selection: int = 0


def plan_run(
    dataset: str,
    predictions_path: str,
    model: str,
    model_cutoff: str,
    run_id: str | None = None,
    ids: Sequence[str] = (),
    domains: Sequence[str] = (),
    tiers: Sequence[str] = (),
    source: str | None = None,
    mirror: str | dict[str, str] | None = None,
    no_cache: bool = False,
) -> RunPlan:
    """Everything checked before a container starts: corpus, predictions, model id and cutoff, run folder."""
    from tasks_lib.core.errors import InputError
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import predictions

    cutoff = _model_and_cutoff(model, model_cutoff)
    everything = corpus.load_corpus(dataset)
    instances = corpus.select(everything, ids, domains, tiers)
    if not instances:
        raise InputError(f"{dataset}: no instances selected")
    checkouts = _Checkouts(instances, source, mirror)
    # A full predictions file meets a selection (SWE-bench's habit): the others' entries counted, not scored.
    preds, outside = predictions.load_selected(
        predictions_path,
        list(checkouts.by_id),
        [i.instance_id for i in everything],
        default_model=model,
        gold_patches={iid: i.patch for iid, i in checkouts.by_id.items()},
        files_reader=checkouts.files_reader,
        require_model=True,
    )
    pred_by_id = {p.instance_id: p for p in preds}
    # Every selected instance stays in the run: one without a prediction is `no_prediction` (unresolved), so
    # the score is resolved / selected, whatever the model chose to skip.
    fingerprint = _fingerprint(pred_by_id)
    run_id = run_id or f"{_slug(model)}-{fingerprint}"
    meta = {
        "run_id": run_id,
        "model": model,
        "model_cutoff": str(cutoff),
        "dataset": str(dataset),
        "predictions": str(predictions_path),
        "predictions_fingerprint": fingerprint,
        "predictions_outside_selection": len(outside),
        "harness_version": HARNESS_VERSION,
        "judge_version": JUDGE_VERSION,
    }
    out_dir = claim_folder(paths.runs_dir() / run_id, meta)
    jobs = {
        iid: ScoringJob(i, pred_by_id[iid], checkouts.sources[iid], checkouts.clone(iid), out_dir / "logs" / iid, no_cache)
        for iid, i in checkouts.by_id.items()
        if iid in pred_by_id
    }  # fmt: skip
    plan = RunPlan(run_id, model, str(cutoff), out_dir, instances, pred_by_id, no_cache, jobs, len(outside))
    write_plan(plan)  # only now, every input resolved: a refusal above leaves nothing to squat the run id
    write_meta(out_dir, meta)
    return plan


class _Checkouts:
    """Each selected instance's source (its era's record) and each source's clone, resolved once for the
    whole run; a clone only when asked (an instance without a prediction needs none)."""

    def __init__(self, instances: list[TaskInstance], source: str | None, mirror: repos.Mirrors):
        from tasks_lib.corpus import load as corpus

        self.by_id = {i.instance_id: i for i in instances}
        self.sources = corpus.sources_for(instances, source)
        repos.check_mirrors(mirror, [s.name for s in self.sources.values()])
        self._mirror = mirror
        self._clones: dict[str, Path] = {}

    def clone(self, iid: str) -> Path:
        src = self.sources[iid]
        if src.name not in self._clones:
            self._clones[src.name] = evaluation.repo_for(src, self._mirror)
        return self._clones[src.name]

    def files_reader(self, iid: str):
        """The base commit's files of one instance (a `files`-format prediction becomes a diff against it)."""
        repo, base = self.clone(iid), self.by_id[iid].base_commit

        def read(path: str) -> str | None:
            data = gitops.read_file(repo, base, path)
            return data.decode("utf-8", errors="surrogateescape") if data is not None else None

        return read


def write_plan(plan: RunPlan) -> Path:
    """The plan beside run.json (`scoring-jobs.jsonl`): one row per selected instance, in the plan's order,
    with its record, its prediction (none: `no_prediction`) and what its scoring was resolved to. A reader
    sees what each instance was scored with; the flow loads the plan from it (`load_plan`) instead of
    resolving it again."""
    rows = []
    for inst in plan.instances:
        job = plan.jobs.get(inst.instance_id)
        pred = plan.predictions.get(inst.instance_id)
        rows.append(
            {
                "instance": dict(inst.record),
                "prediction": None
                if pred is None
                else {
                    "model_name_or_path": pred.model_name_or_path,
                    "model_patch": pred.model_patch,
                    "source_format": str(pred.source_format),
                },
                "source": job.source.name if job else None,
                "era": job.source.era if job else None,
                "repo": str(job.repo) if job else None,
                "trace": str(job.trace) if job else None,
                "no_cache": plan.no_cache,
            }
        )
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    path = plan.out_dir / JOBS_FILE
    tmp = path.with_name(f".{JOBS_FILE}.{os.getpid()}")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)
    return path


def load_plan(out_dir: str | Path) -> RunPlan:
    """The plan `plan_run` wrote in a run folder (run.json and `scoring-jobs.jsonl`): nothing is resolved
    again but each job's source record, read by name and era."""
    from tasks_lib.judge.predictions import PredictionFormat
    from tasks_lib.sources.record import load_source

    out_dir = Path(out_dir)
    meta = json.loads((out_dir / "run.json").read_text())
    instances, predictions, jobs, no_cache = [], {}, {}, False
    for line in (out_dir / JOBS_FILE).read_text().splitlines():
        row = json.loads(line)
        inst = TaskInstance.of(row["instance"])
        instances.append(inst)
        no_cache = bool(row["no_cache"])
        if row["prediction"] is None:
            continue
        fields = {**row["prediction"], "source_format": PredictionFormat(row["prediction"]["source_format"])}
        predictions[inst.instance_id] = pred = Prediction(inst.instance_id, **fields)
        source = load_source(row["source"]).for_era(row["era"])
        jobs[inst.instance_id] = ScoringJob(
            inst, pred, source, Path(row["repo"]), Path(row["trace"]), no_cache
        )
    return RunPlan(
        meta["run_id"], meta["model"], meta["model_cutoff"], out_dir, instances, predictions,
        no_cache=no_cache, jobs=jobs, outside_selection=meta.get("predictions_outside_selection", 0),
    )  # fmt: skip


def _model_and_cutoff(model: str, model_cutoff: str) -> date:
    from tasks_lib.core.errors import InputError
    from tasks_lib.corpus import tiering

    if not model or not model.strip():
        raise InputError("--model: a model id is required (it is stored with the run)")
    cutoff = tiering.parse_date(model_cutoff, "--model-cutoff")
    if cutoff is None:
        raise InputError("--model-cutoff: the model's disclosed training cutoff (YYYY-MM-DD) is required")
    return cutoff


def _fingerprint(predictions: dict[str, Prediction]) -> str:
    keyed = "\0".join(f"{i}:{predictions[i].patch_sha256}" for i in sorted(predictions))
    return hashlib.sha256(keyed.encode()).hexdigest()[:12]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "model"


def schedule(plan: RunPlan) -> list[str]:
    """The instances to score, longest expected first (a frontend side starts a backend-serve container, a
    dev server and a browser: the costliest; then more test files), so that with N workers the last to start
    is a short one and no worker is left alone at the end with the longest (longest-processing-time first).
    The rows are written in the plan's order whatever this order is."""

    def cost(inst: TaskInstance) -> tuple[int, int, str]:
        sides = inst.sides()
        files = {t.split("::", 1)[0] for side in sides for kind in inst.tests(side) for t in kind}
        return (-sum(3 if str(side) == "frontend" else 1 for side in sides), -len(files), inst.instance_id)

    return [i.instance_id for i in sorted(plan.instances, key=cost) if i.instance_id in plan.predictions]


def missing(plan: RunPlan) -> list[TaskInstance]:
    """The selected instances the predictions say nothing about (scored without a container)."""
    return [i for i in plan.instances if i.instance_id not in plan.predictions]


def no_prediction(instance: TaskInstance) -> Verdict:
    from tasks_lib.core.constants import Status

    return Verdict(
        instance.instance_id,
        False,
        Status.NO_PREDICTION,
        f2p_total=sum(len(instance.tests(side)[0]) for side in ("backend", "frontend")),
        p2p_total=sum(len(instance.tests(side)[1]) for side in ("backend", "frontend")),
        note="no prediction for this instance: unresolved, counted in the score's denominator",
    )


def score_job(job: ScoringJob, settings: Settings | None = None) -> Verdict:
    cache = evaluation.VerdictCache(refresh=job.no_cache)
    return evaluation.score_instance(
        job.instance, job.prediction, job.source, job.repo, job.trace, cache=cache, settings=settings
    )


class Ahead:
    """The next instance's first run made while one is scored (`evaluation.stage`, `engine.staging`): when the
    flow submits an instance, the one after it in `order` is staged, when the run has fewer workers than the
    host has Docker slots (one worker, two slots: the spare slot is the staged run's) and a slot is free.
    `close` removes what nobody took."""

    def __init__(self, plan: RunPlan, order: list[str], workers: int, settings: Settings | None = None):
        from tasks_lib.core import limits

        self.plan, self.settings = plan, settings
        self.next = dict(zip(order, order[1:], strict=False))
        self.active = workers < limits.docker_slots()

    def after(self, instance_id: str) -> bool:
        job = self.plan.jobs.get(self.next.get(instance_id, ""))
        if job is None or not self.active:
            return False
        try:
            cache = evaluation.VerdictCache(refresh=job.no_cache)
            return evaluation.stage(
                job.instance,
                job.prediction,
                job.source,
                job.repo,
                job.trace,
                cache=cache,
                settings=self.settings,
            )
        except Exception as exc:  # a run made ahead is a saving, never a failure: the scoring runs it anyway
            log.info("%s: not made ahead (%s)", job.instance_id, exc)
            return False

    def close(self) -> None:
        from tasks_lib.engine import staging

        staging.discard()


def answer_from_cache(plan: RunPlan, settings: Settings | None = None) -> dict[str, Verdict] | None:
    """Every verdict of the run without an image build, a container or Prefect, when each planned instance is
    a cache hit, a patch refused before any run, or has no prediction. None at the first instance that needs a
    real run: probing stops there, so a run that is not cached pays for one probe. None for a run that ignores
    the cache (`no_cache`)."""
    if plan.no_cache:
        return None

    verdicts: dict[str, Verdict] = {}
    for inst in plan.instances:
        iid = inst.instance_id
        job = plan.jobs.get(iid)
        if job is None:
            verdicts[iid] = no_prediction(inst)
            continue
        verdict = evaluation.cached_verdict(
            job.instance, job.prediction, job.source, job.repo, job.trace, settings=settings
        )
        if verdict is None:
            return None
        verdicts[iid] = verdict
    return verdicts


def write_charts(plan: RunPlan) -> list[Path]:
    """The run's charts (`pbench report --chart` of this run: rates by cutoff and domain, the instance grid)
    under the run folder."""
    from tasks_lib.judge import leaderboard, reporting

    if not (plan.out_dir / "results.parquet").is_file():
        return []
    return leaderboard.write_charts(reporting.load_results([plan.out_dir]), plan.out_dir / "charts")


def finish_run(plan: RunPlan, verdicts: dict[str, Verdict]) -> dict:
    """The run's outputs from verdicts in memory (a run answered from the cache, a short command)."""
    with arrow_without_pandas():
        writer = run_writer(plan)
        for inst in plan.instances:
            add_verdict(writer, plan, inst, verdicts[inst.instance_id])
        return finish_writer(writer, plan)


@contextlib.contextmanager
def arrow_without_pandas():
    """Tables built from plain rows without importing pandas (~0.5 s here, most of a cached `pbench evaluate`).

    pyarrow imports pandas the first time it builds any array, to ask whether the values are pandas objects;
    an import refused here makes it answer "no pandas" for the rest of the process. Only for a short command
    that hands pyarrow plain rows and ends: later, pa.array() of a pandas Series goes through the slower
    sequence path (to_pandas and from_pandas import pandas again and work). No-op once pandas is imported."""
    if "pandas" in sys.modules:
        yield
        return
    refuse = _RefusePandas()
    sys.meta_path.insert(0, refuse)
    try:
        yield
    finally:
        sys.meta_path.remove(refuse)


class _RefusePandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not imported by this command (runs.arrow_without_pandas)")
        return None


def run_writer(plan: RunPlan):
    """The run's tables, written as its verdicts arrive (reporting.RunWriter), in the plan's instance order."""
    from tasks_lib.judge import reporting

    return reporting.RunWriter(plan.out_dir, [i.instance_id for i in plan.instances])


def add_verdict(writer, plan: RunPlan, instance: TaskInstance, verdict: Verdict) -> None:
    from tasks_lib.judge import reporting

    cutoff = date.fromisoformat(plan.model_cutoff)
    writer.add(
        reporting.result_row(plan.run_id, plan.model, cutoff, instance, verdict),
        reporting.test_rows(plan.run_id, plan.model, verdict),
    )


def finish_writer(writer, plan: RunPlan) -> dict:
    from tasks_lib.judge import run_state

    report = writer.finish(json.loads((plan.out_dir / "run.json").read_text()))
    run_state.clear_unfinished(plan.out_dir)  # every instance scored: the run is finished
    return report


def verdict_path(plan: RunPlan, instance_id: str) -> Path:
    """Where a planned scoring's verdict is spilled: beside its job's trace (one derivation of the path)."""
    return plan.jobs[instance_id].trace / VERDICT_FILE


def spill(job: ScoringJob, verdict: Verdict) -> Path:
    """The verdict written beside its trace (`logs/<id>/verdict.json`, on the output folder every worker
    shares), where the flow reads it (`verdict_path`): a scoring task returns nothing, so that the task
    results Prefect keeps until the flow ends do not hold every test row of the run."""
    path = job.trace / VERDICT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".verdict.json.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(verdict.to_json(), default=str))
    tmp.replace(path)
    return path


def unspill(path: Path) -> Verdict:
    return Verdict.from_json(json.loads(Path(path).read_text()))


def progress_line(done: int, total: int, verdict: Verdict, counts) -> str:
    cached = " (cached)" if verdict.cached else ""
    return (
        f"[{done}/{total}] {verdict.instance_id}: {verdict.status}{cached} — resolved {counts['resolved']}, "
        f"failed {counts['failed']}, errored {counts['errored']}"
    )
