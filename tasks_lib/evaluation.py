"""Scoring one prediction through the engine, with a verdict cache keyed by content, not by run id.

Per instance: validate the patch (before any container), then for each side with tests: base checkout,
the agent's patch (test files it touched are put back to base), the forced test patch, the tests, the
grade. Infrastructure failures are retried a bounded number of times and then reported as such, never
as the model's failure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasks_lib import engine, gitops, grading, images, lockcheck, patches, paths, static_check, tooling
from tasks_lib.config import Settings
from tasks_lib.constants import HARNESS_VERSION, Blame, RunStatus, Side, Status, default_blame
from tasks_lib.errors import ImageBuildError, InfraError
from tasks_lib.predictions import Prediction
from tasks_lib.sources import SourceRecord

log = logging.getLogger(__name__)


@dataclass
class TestRow:
    side: str
    test_id: str
    expected: str  # fail_to_pass | pass_to_pass
    outcome: str  # an Outcome, or "missing"
    passed: bool


@dataclass
class Verdict:
    instance_id: str
    resolved: bool
    status: str
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    backend_status: str | None = None
    frontend_status: str | None = None
    exit_code_mismatch: bool = False
    patch_sha256: str = ""
    image_id: str = ""
    harness_version: str = HARNESS_VERSION
    duration_s: float = 0.0
    attempts: int = 0
    cached: bool = False
    executed_by: str = ""  # host:pid that ran the containers (a Dask worker, or the flow's process)
    trace_dir: str = ""
    note: str = ""
    blame: str = ""  # "patch" (exit 1) or "harness" (exit 2, retried); "" when resolved
    tampering: list[str] = field(default_factory=list)  # what the guards saw: never a pass
    static_flags: list[str] = field(default_factory=list)  # the static check of the patch (static_check.py)
    tests: list[TestRow] = field(default_factory=list)

    @property
    def infra_failure(self) -> bool:
        blame = self.blame or default_blame(Status(self.status))
        return blame == Blame.HARNESS

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        data = dict(data)
        data["tests"] = [TestRow(**t) for t in data.get("tests", [])]
        return cls(**data)


def _tests_of(instance: dict, side: Side) -> tuple[list[str], list[str]]:
    return list(instance["fail_to_pass"].get(side, [])), list(instance["pass_to_pass"].get(side, []))


def _selection(f2p: list[str], p2p: list[str]) -> tuple[str, ...]:
    """Run the test files that hold the graded tests (not single ids: a file's fixtures may interact)."""
    return tuple(sorted({t.split("::", 1)[0] for t in [*f2p, *p2p]}))


def cache_key(instance_id: str, patch_sha: str, image_id: str) -> str:
    return hashlib.sha256(f"{instance_id}\0{patch_sha}\0{image_id}\0{HARNESS_VERSION}".encode()).hexdigest()


class VerdictCache:
    """Verdicts on disk, keyed by instance id + patch hash + image id + harness version."""

    def __init__(self, root: Path | None = None):
        self.root = root or paths.cache_dir() / "verdicts"

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Verdict | None:
        p = self._path(key)
        if not p.exists():
            return None
        return Verdict.from_json(json.loads(p.read_text()))

    def put(self, key: str, verdict: Verdict) -> None:
        if verdict.infra_failure:
            return  # never cache the harness's own trouble
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(verdict.to_json(), indent=1))
        tmp.replace(p)


def _env_image_id(source: SourceRecord, repo: Path, instance: dict, patch: str, settings: Settings) -> str:
    """The image the backend run will use (built now if missing): part of the cache key. A patched lock that
    fails to build twice while the base lock builds is the patch's failure (PatchBuildError); a registry
    hiccup gets the second try, and a base lock that does not build either is the harness's."""
    chain = [(patch, True), (instance["test_patch"], False)]
    spec, _ = images.run_env_specs(source, repo, instance["base_commit"], chain, "backend", settings)
    base, _ = images.run_env_specs(source, repo, instance["base_commit"], chain[1:], "backend", settings)
    try:
        return images.ensure_env_image(spec, settings).id
    except ImageBuildError as first:
        if base.key("") == spec.key(""):
            raise
        try:
            return images.ensure_env_image(spec, settings).id
        except ImageBuildError:
            pass
        images.ensure_env_image(base, settings)  # raises (the harness's failure) when the base does not build
        raise PatchBuildError(
            f"the patch's dependency change does not build (twice), the base lock does: {first}"
        ) from None


class PatchBuildError(ImageBuildError):
    """An environment image of the agent's patched dependency files that cannot be built: the patch's."""


def _run_side(
    instance: dict,
    prediction: Prediction,
    source: SourceRecord,
    repo: Path,
    side: Side,
    trace: Path,
    settings: Settings,
    plugins: tuple[str, ...] | None = None,
) -> tuple[grading.Grade, engine.RunResult, list[TestRow]]:
    f2p, p2p = _tests_of(instance, side)
    # The whole test patch on every side: the backend-serve container of a frontend run gets the same tree.
    test_patch = instance["test_patch"]
    chain = (
        engine.PatchInput("agent", prediction.model_patch, untrusted=True),
        engine.PatchInput("test_patch", test_patch),
    )
    # One engine run per folder: the engine reads result.json and junit.xml from here after copying the
    # container's outputs in, so what an earlier run left (an earlier attempt, a rerun of the run id, a
    # reused `pbench score --out`) would be read as this run's results when this one's container dies.
    if trace.exists():
        shutil.rmtree(trace)
    trace.mkdir(parents=True)
    # Bytes as read: a patch of a Latin-1 file holds surrogate escapes that text mode cannot write.
    (trace / "agent.diff").write_bytes(patches.patch_bytes(prediction.model_patch))
    (trace / "test_patch.diff").write_bytes(patches.patch_bytes(test_patch))
    request = engine.RunRequest(
        source,
        repo,
        instance["base_commit"],
        trace,
        chain,
        _selection(f2p, p2p),
        side,
        label=f"{instance['instance_id']} {side}",
        pytest_plugins=plugins,
    )
    from docker.errors import DockerException

    try:
        result = engine.run_tests(request, settings)
    except (OSError, DockerException, InfraError) as exc:
        # The engine could not reach the Docker daemon at all (stopped, restarting): an infrastructure
        # attempt like any other, retried and reported as such, instead of a crashed task and a run with
        # no rows.
        result = engine.RunResult(
            RunStatus.INFRA_ERROR,
            log_dir=str(trace),
            error=f"{type(exc).__name__}: {exc}",
            blame=Blame.HARNESS,
        )
    g = grading.grade(
        f2p,
        p2p,
        result.status,
        result.tests,
        suite_ran=result.suite_ran,
        collection_errors=result.collection_errors,
        exit_code_mismatch=result.exit_code_mismatch,
        report_disagreements=result.report_disagreements,
        tampering=result.tampering,
        canary_doubts=result.canary_doubts,
        blame=result.blame,
    )
    if result.restored and not g.infra_failure:
        # Only an untrusted patch's files are ever restored: it edited tests or what decides how they run
        # (found inside the container, e.g. the pytest table of pyproject.toml, or a symlink).
        why = [f"{rel} ({result.restored_why.get(rel, 'protected')})" for rel in result.restored[:5]]
        g = dataclasses.replace(
            g,
            resolved=False,
            status=Status.PATCH_TOUCHES_TESTS,
            blame=Blame.PATCH,
            note="; ".join(
                filter(
                    None,
                    [f"restored to base before the tests: {', '.join(why)}", g.note if g.tampering else ""],
                )
            ),
        )
    rows = []
    for expected, ids in (("fail_to_pass", f2p), ("pass_to_pass", p2p)):
        for test_id in ids:
            outcome = result.tests.get(test_id)
            rows.append(
                TestRow(
                    str(side),
                    test_id,
                    expected,
                    str(outcome) if outcome else "missing",
                    outcome is not None and str(outcome) == "passed",
                )
            )
    return g, result, rows


def score_instance(
    instance: dict,
    prediction: Prediction,
    source: SourceRecord,
    repo: Path,
    trace_dir: Path,
    *,
    cache: VerdictCache | None = None,
    settings: Settings | None = None,
    infra_retries: int = 2,
) -> Verdict:
    """The verdict for one (instance, prediction). Never raises for a task-level problem."""
    settings = settings or Settings.from_env()
    start = time.monotonic()
    iid = instance["instance_id"]
    verdict = Verdict(
        iid, False, Status.INFRA_ERROR.value, patch_sha256=prediction.patch_sha256, trace_dir=str(trace_dir)
    )
    problems = patches.validate_patch(prediction.model_patch, source) or _dependency_problems(
        source, repo, instance, prediction.model_patch, settings
    )
    if problems:
        return _refused(verdict, prediction, problems, trace_dir, start)
    findings = static_check.scan(prediction.model_patch, source)
    verdict.static_flags = [str(f) for f in findings]
    try:
        image_id = _env_image_id(source, repo, instance, prediction.model_patch, settings)
    except ImageBuildError as exc:
        verdict.status = Status.IMAGE_BUILD_FAILED.value
        verdict.blame = Blame.PATCH if isinstance(exc, PatchBuildError) else Blame.HARNESS
        verdict.note = str(exc)
        verdict.duration_s = round(time.monotonic() - start, 3)
        return verdict
    except Exception as exc:  # the daemon is unreachable: the harness's
        verdict.status, verdict.blame, verdict.note = Status.IMAGE_BUILD_FAILED.value, Blame.HARNESS, str(exc)
        return verdict
    try:
        tooling_problems, plugins = _tooling(source, repo, instance, prediction.model_patch, settings)
    except ImageBuildError as exc:  # the base (or reference) lock's image does not build: the harness's
        verdict.status, verdict.blame, verdict.note = Status.IMAGE_BUILD_FAILED.value, Blame.HARNESS, str(exc)
        return verdict
    if tooling_problems:
        verdict.status, verdict.blame = Status.PATCH_TOUCHES_TESTS.value, Blame.PATCH
        verdict.note = "the patch changes the test tooling of the image: " + "; ".join(tooling_problems)
        verdict.duration_s = round(time.monotonic() - start, 3)
        return verdict
    key = cache_key(iid, prediction.patch_sha256, image_id)
    cache = cache or VerdictCache()
    hit = cache.get(key)
    if hit is not None:
        hit.cached = True
        if hit.trace_dir and Path(hit.trace_dir).exists() and Path(hit.trace_dir) != trace_dir:
            shutil.copytree(hit.trace_dir, trace_dir, dirs_exist_ok=True)
        hit.trace_dir = str(trace_dir)
        return hit
    total, rows, statuses, mismatch, infra_attempts = _attempts(
        instance, prediction, source, repo, trace_dir, settings, infra_retries, verdict, plugins
    )
    blocking = static_check.blocking(findings, static_check.scan(instance.get("patch", ""), source))
    if blocking:
        # What the patch says it does to the test runner: never a pass, whatever the run reported.
        total = dataclasses.replace(
            total,
            resolved=False,
            status=total.status if not total.resolved else Status.TESTS_FAILED,
            blame=Blame.PATCH if not total.infra_failure else total.blame,
            tampering=[*total.tampering, *blocking],
            note="; ".join(
                filter(None, ["tampering (static check): " + "; ".join(blocking[:2]), total.note])
            ),
        )
    verdict.resolved = total.resolved
    verdict.status = str(total.status)
    verdict.blame = str(total.blame)
    verdict.tampering = list(dict.fromkeys(total.tampering))
    verdict.f2p_passed, verdict.f2p_total = total.f2p_passed, total.f2p_total
    verdict.p2p_passed, verdict.p2p_total = total.p2p_passed, total.p2p_total
    verdict.backend_status = statuses.get("backend")
    verdict.frontend_status = statuses.get("frontend")
    verdict.exit_code_mismatch = mismatch
    verdict.note = "; ".join(filter(None, [total.note, *infra_attempts]))
    verdict.tests = rows
    verdict.duration_s = round(time.monotonic() - start, 3)
    verdict.executed_by = f"{socket.gethostname()}:{os.getpid()}"
    cache.put(key, verdict)
    return verdict


def _dependency_problems(source: SourceRecord, repo: Path, instance: dict, patch: str, settings: Settings):
    """What the agent's change to the dependency files references beyond the package index (patch_invalid)."""
    out = []
    for side in ("backend", "frontend") if source.frontend is not None else ("backend",):
        commit, test_patch = instance["base_commit"], instance["test_patch"]
        base = images.dependency_contents(source, repo, commit, [test_patch], side)
        patched = images.dependency_contents(source, repo, commit, [patch, test_patch], side)
        out += lockcheck.check(base, patched, npm_registry=settings.npm_registry)
    return out


def _tooling(source: SourceRecord, repo: Path, instance: dict, patch: str, settings: Settings):
    """(problems, allowed pytest plugins) when the agent's patch changes a lock: the patched image's test
    runners must be the base lock's (or the reference patch's), and only the plugins those have may load."""
    commit, test_patch = instance["base_commit"], instance["test_patch"]
    sides = ["backend", "frontend"] if source.frontend is not None else ["backend"]

    def specs(name: str):
        chain = {
            "agent": [(patch, True), (test_patch, False)],
            "base": [(test_patch, False)],
            "reference": [(instance.get("patch", ""), True), (test_patch, False)],
        }[name]
        return images.run_env_specs(source, repo, commit, chain, sides[-1], settings)

    problems, plugins = [], None
    agent_specs, base_specs = specs("agent"), specs("base")
    for i, side in enumerate(sides):
        agent, base = agent_specs[i], base_specs[i]
        if agent is None or agent.key("") == base.key(""):
            continue
        of = lambda spec: tooling.of_image(images.ensure_env_image(spec, settings).id)  # noqa: E731
        patched, before = of(agent), of(base)
        reference = None
        if patched.runner_changes(before) or set(patched.plugins) - set(before.plugins):
            reference = of(specs("reference")[i])
        side_problems, allowed = tooling.check(patched, before, reference)
        problems += side_problems
        if side == "backend":
            plugins = tuple(allowed)
    return problems, plugins


def _refused(verdict: Verdict, prediction: Prediction, problems, trace_dir: Path, start: float) -> Verdict:
    """A patch the validator refuses before any container starts (patch_invalid, patch_touches_tests)."""
    verdict.status = str(patches.problems_status(problems))
    verdict.blame = Blame.PATCH
    verdict.note = "; ".join(p.message for p in problems)[:2000]
    trace_dir.mkdir(parents=True, exist_ok=True)
    (trace_dir / "agent.diff").write_bytes(patches.patch_bytes(prediction.model_patch))
    (trace_dir / "rejected.txt").write_text(verdict.note + "\n")
    verdict.duration_s = round(time.monotonic() - start, 3)
    return verdict


def _attempts(instance, prediction, source, repo, trace_dir, settings, infra_retries, verdict, plugins=None):
    """Every side of the instance, again while the harness is to blame (at most `infra_retries` more times)."""
    sides = [s for s in (Side.BACKEND, Side.FRONTEND) if any(_tests_of(instance, s))]
    infra_attempts: list[str] = []  # why attempts were not verdicts: kept in the note, beside `attempts`
    for attempt in range(1, infra_retries + 2):
        grades, rows, mismatch = [], [], False
        statuses: dict[str, str] = {}
        errors: list[str] = []
        for side in sides:
            g, result, side_rows = _run_side(
                instance, prediction, source, repo, side, trace_dir / str(side), settings, plugins
            )
            grades.append(g)
            rows += side_rows
            statuses[str(side)] = str(g.status)
            mismatch |= result.exit_code_mismatch
            verdict.image_id = verdict.image_id or result.image_id
            if g.infra_failure and result.error:
                errors.append(f"{side}: {result.error}"[:300])
        total = grading.combine(grades)
        verdict.attempts = attempt
        if not total.infra_failure:
            break
        infra_attempts.append(
            f"attempt {attempt}: {total.status} ({'; '.join(errors) or 'no error recorded'})"
        )
        log.warning("%s: %s", verdict.instance_id, infra_attempts[-1])
    return total, rows, statuses, mismatch, infra_attempts


def repo_for(source: SourceRecord, mirror: str | Path | None = None) -> Path:
    return gitops.repo_dir(source, mirror)


# ----------------------------------------------------------------------------- a whole run


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    model: str
    model_cutoff: str
    out_dir: Path
    instances: list[dict]
    predictions: dict[str, Prediction]
    source_override: str | None = None
    mirror: str | None = None


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
    mirror: str | None = None,
) -> RunPlan:
    """Everything checked before a container starts: corpus, predictions, model id and cutoff, run folder."""
    from tasks_lib import corpus, predictions, tiering
    from tasks_lib.errors import InputError

    if not model or not model.strip():
        raise InputError("--model: a model id is required (it is stored with the run)")
    cutoff = tiering.parse_date(model_cutoff, "--model-cutoff")
    if cutoff is None:
        raise InputError("--model-cutoff: the model's disclosed training cutoff (YYYY-MM-DD) is required")
    instances = corpus.select(corpus.load_corpus(dataset), ids, domains, tiers)
    if not instances:
        raise InputError(f"{dataset}: no instances selected")
    by_id = {i["instance_id"]: i for i in instances}

    def files_reader(iid: str):
        inst = by_id[iid]
        repo = repo_for(corpus.source_for(inst, source), mirror)

        def read(path: str) -> str | None:
            data = gitops.read_file(repo, inst["base_commit"], path)
            return data.decode("utf-8", errors="surrogateescape") if data is not None else None

        return read

    preds = predictions.load_predictions(
        predictions_path,
        list(by_id),
        default_model=model,
        gold_patches={i: by_id[i]["patch"] for i in by_id},
        files_reader=files_reader,
    )
    pred_by_id = {p.instance_id: p for p in preds}
    if predictions_path not in predictions.SPECIALS:
        instances = [i for i in instances if i["instance_id"] in pred_by_id]
    fingerprint = hashlib.sha256(
        "\0".join(f"{i}:{pred_by_id[i].patch_sha256}" for i in sorted(pred_by_id)).encode()
    ).hexdigest()[:12]
    run_id = run_id or f"{_slug(model)}-{fingerprint}"
    out_dir = paths.runs_dir() / run_id
    meta_path = out_dir / "run.json"
    meta = {
        "run_id": run_id,
        "model": model,
        "model_cutoff": str(cutoff),
        "dataset": str(dataset),
        "predictions": str(predictions_path),
        "predictions_fingerprint": fingerprint,
        "harness_version": HARNESS_VERSION,
    }
    if meta_path.exists():
        old = json.loads(meta_path.read_text())
        same = all(old.get(k) == meta[k] for k in ("model", "model_cutoff", "predictions_fingerprint"))
        if not same:
            raise InputError(
                f"--run-id {run_id}: {out_dir} already holds a run of another model, cutoff or set "
                "of predictions; choose another run id (runs are never overwritten silently)"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps(meta, indent=2))
    return RunPlan(run_id, model, str(cutoff), out_dir, instances, pred_by_id, source, mirror)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:60] or "model"


def score_planned(plan: RunPlan, instance: dict, settings: Settings | None = None) -> Verdict:
    from tasks_lib import corpus

    source = corpus.source_for(instance, plan.source_override)
    repo = repo_for(source, plan.mirror)
    prediction = plan.predictions[instance["instance_id"]]
    trace = plan.out_dir / "logs" / instance["instance_id"]
    return score_instance(instance, prediction, source, repo, trace, settings=settings)


def finish_run(plan: RunPlan, verdicts: dict[str, Verdict]) -> dict:
    from datetime import date as _date

    from tasks_lib import reporting

    cutoff = _date.fromisoformat(plan.model_cutoff)
    rows, tests = [], []
    for inst in plan.instances:
        v = verdicts[inst["instance_id"]]
        rows.append(reporting.result_row(plan.run_id, plan.model, cutoff, inst, v))
        tests += reporting.test_rows(plan.run_id, plan.model, v)
    meta = json.loads((plan.out_dir / "run.json").read_text())
    return reporting.write_run_outputs(plan.out_dir, rows, tests, meta)
