"""Scoring one prediction through the engine, with a verdict cache keyed by content, not by run id.

Per instance: validate the patch (before any container), then for each side with tests: base checkout,
the agent's patch (test files it touched are put back to base), the forced test patch, the tests, the
grade. Infrastructure failures are retried a bounded number of times and then reported as such, never
as the model's failure.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import socket
import time
from pathlib import Path

from tasks_lib import engine
from tasks_lib.core import docker_client
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import Blame, RunStatus, Side, Status
from tasks_lib.core.errors import ImageBuildError, InfraError
from tasks_lib.corpus.instance import TaskInstance
from tasks_lib.engine import grading
from tasks_lib.engine.harness_id import recipe_key
from tasks_lib.formats import patches
from tasks_lib.images import build as images
from tasks_lib.judge import static_check
from tasks_lib.judge.predictions import Prediction
from tasks_lib.judge.tooling import dependency_problems as _dependency_problems
from tasks_lib.judge.tooling import patched_tooling as _tooling
from tasks_lib.judge.verdicts import TestRow, Verdict, VerdictCache, cache_key, graded_digest  # noqa: F401  (their home; re-exported)
from tasks_lib.sources import repos
from tasks_lib.sources.record import SourceRecord

log = logging.getLogger(__name__)


def _tests_of(instance, side: Side) -> tuple[list[str], list[str]]:
    return TaskInstance.of(instance).tests(side)


def _selection(f2p: list[str], p2p: list[str]) -> tuple[str, ...]:
    """Run the test files that hold the graded tests (not single ids: a file's fixtures may interact)."""
    return tuple(sorted({t.split("::", 1)[0] for t in [*f2p, *p2p]}))


def _env_image_id(instance: TaskInstance, patch: str, book: images.EnvSpecBook) -> str:
    """The image the backend run will use (built now if missing): part of the cache key. A patched lock that
    fails to build twice while the base lock builds is the patch's failure (PatchBuildError); a registry
    hiccup gets the second try, and a base lock that does not build either is the harness's."""
    chain = [(patch, True), (instance.test_patch, False)]
    settings = book.settings
    spec, _ = book.of(chain, "backend")
    base, _ = book.of(chain[1:], "backend")
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


def executed_by() -> str:
    """`host:pid` of the process that ran the containers, `host:pid@<DOCKER_HOST>` when it drives an engine
    other than the default one (two engines on one machine, a Dask worker per engine)."""
    engine = docker_client.engine()
    return f"{socket.gethostname()}:{os.getpid()}" + (f"@{engine}" if engine else "")


class PatchBuildError(ImageBuildError):
    """An environment image of the agent's patched dependency files that cannot be built: the patch's."""


def _side_request(
    instance: TaskInstance, prediction: Prediction, source, repo, side: Side, trace: Path, plugins, book=None
) -> engine.RunRequest:
    """The engine run of one side: the agent's patch (untrusted), then the whole test patch (the
    backend-serve container of a frontend run gets the same tree), on the test files of the graded tests."""
    # One engine run per folder: the engine reads result.json and junit.xml from here after copying the
    # container's outputs in, so what an earlier run left (an earlier attempt, a rerun of the run id, a
    # reused `pbench score --out`) would be read as this run's results when this one's container dies.
    if trace.exists():
        shutil.rmtree(trace)
    trace.mkdir(parents=True)
    # Bytes as read: a patch of a Latin-1 file holds surrogate escapes that text mode cannot write.
    (trace / "agent.diff").write_bytes(patches.patch_bytes(prediction.model_patch))
    (trace / "test_patch.diff").write_bytes(patches.patch_bytes(instance.test_patch))
    return _request(instance, prediction, source, repo, side, trace, plugins, book)


def _request(
    instance: TaskInstance, prediction: Prediction, source, repo, side: Side, trace: Path, plugins, book
):
    """The engine request of one side (`_side_request` without the trace folder's files)."""
    f2p, p2p = instance.tests(side)
    chain = (
        engine.PatchInput("agent", prediction.model_patch, untrusted=True),
        engine.PatchInput("test_patch", instance.test_patch),
    )
    return engine.RunRequest(
        source,
        repo,
        instance.base_commit,
        trace,
        chain,
        _selection(f2p, p2p),
        side,
        label=f"{instance.instance_id} {side}",
        pytest_plugins=plugins,
        graded=(*f2p, *p2p),
        specs=book,
    )


def _run(request: engine.RunRequest, settings: Settings) -> engine.RunResult:
    from docker.errors import DockerException

    try:
        return engine.run_tests(request, settings)
    except (OSError, DockerException, InfraError) as exc:
        # The engine could not reach the Docker daemon at all (stopped, restarting): an infrastructure
        # attempt like any other, retried and reported as such, instead of a crashed task and a run with
        # no rows.
        return engine.RunResult(
            RunStatus.INFRA_ERROR,
            log_dir=str(request.log_dir),
            error=f"{type(exc).__name__}: {exc}",
            blame=Blame.HARNESS,
        )


def grade_side(f2p: list[str], p2p: list[str], result: engine.RunResult) -> grading.Grade:
    """The grade of one side's run; files restored to base make it `patch_touches_tests` (only an untrusted
    patch's files are ever restored: it edited tests or what decides how they run)."""
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
        witness_doubts=result.witness_doubts,
        blame=result.blame,
    )
    if not result.restored or g.infra_failure:
        return g
    why = [f"{rel} ({result.restored_why.get(rel, 'protected')})" for rel in result.restored[:5]]
    restored = f"restored to base before the tests: {', '.join(why)}"
    note = "; ".join(filter(None, [restored, g.note if g.tampering else ""]))
    return dataclasses.replace(
        g, resolved=False, status=Status.PATCH_TOUCHES_TESTS, blame=Blame.PATCH, note=note
    )


def side_rows(side: Side, f2p: list[str], p2p: list[str], result: engine.RunResult) -> list[TestRow]:
    rows = []
    for expected, ids in (("fail_to_pass", f2p), ("pass_to_pass", p2p)):
        for test_id in ids:
            outcome = result.tests.get(test_id)
            passed = outcome is not None and str(outcome) == "passed"
            rows.append(TestRow(str(side), test_id, expected, str(outcome) if outcome else "missing", passed))
    return rows


def _run_side(instance, prediction, source, repo, side, trace, settings, plugins=None, book=None):
    instance = TaskInstance.of(instance)
    result = _run(_side_request(instance, prediction, source, repo, side, trace, plugins, book), settings)
    f2p, p2p = instance.tests(side)
    return grade_side(f2p, p2p, result), result, side_rows(side, f2p, p2p, result)


def score_instance(
    instance,
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
    job = _Scoring.of(instance, prediction, source, repo, trace_dir, settings)
    early = job.before_any_run()
    if early is not None:
        return early
    cache = cache or VerdictCache()
    hit = cache.get(job.key)
    if hit is not None:
        return job.from_cache(hit)
    verdict = job.run(infra_retries)
    cache.put(job.key, verdict)
    return verdict


def stage(
    instance,
    prediction: Prediction,
    source: SourceRecord,
    repo: Path,
    trace_dir: Path,
    *,
    cache: VerdictCache | None = None,
    settings: Settings | None = None,
) -> bool:
    """Make ahead, in the background, the first engine run `score_instance` will start for this prediction
    (`engine.staging`): while another instance's tests run, the next one's containers are made and its runner
    sets its tree up. Nothing when the verdict needs no run (refused, cached), an image would have to be built,
    or the first side is a frontend one. Writes nothing to the trace folder that the scoring would not write
    the same (a refused patch's reason): the run's files go there when the run goes."""
    job = _Scoring.of(instance, prediction, source, repo, trace_dir, settings)
    try:
        with images.lookup_only():
            early = job.before_any_run()
    except images.NotBuilt:
        return False
    if early is not None or (cache or VerdictCache()).get(job.key) is not None:
        return False
    side = job.instance.sides()[0]
    request = _request(
        job.instance, prediction, source, repo, side, trace_dir / str(side), job.plugins, job.specs
    )
    return engine.staging.stage(request, job.settings)


def cached_verdict(
    instance,
    prediction: Prediction,
    source: SourceRecord,
    repo: Path,
    trace_dir: Path,
    *,
    cache: VerdictCache | None = None,
    settings: Settings | None = None,
) -> Verdict | None:
    """What `score_instance` would answer without building an image or starting any container: the patch
    refused before any run, or the verdict cached for this content. None when the instance needs a real run
    (a cache miss, an image to build, a tooling probe to run, or trouble of the harness's, which the real run
    retries)."""
    job = _Scoring.of(instance, prediction, source, repo, trace_dir, settings)
    try:
        with images.lookup_only():
            early = job.before_any_run()
    except images.NotBuilt:
        return None
    if early is not None:
        return None if early.infra_failure else early
    hit = (cache or VerdictCache()).get(job.key)
    return job.from_cache(hit) if hit is not None else None


class _Scoring:
    """One scoring: what is decided before any container (validator, dependency files, static check, image,
    test tooling), then the attempts, then the verdict."""

    @classmethod
    def of(cls, instance, prediction, source, repo, trace_dir: Path, settings: Settings | None) -> _Scoring:
        return cls(
            TaskInstance.of(instance), prediction, source, repo, trace_dir, settings or Settings.from_env()
        )

    def __init__(self, instance: TaskInstance, prediction, source, repo, trace_dir: Path, settings: Settings):
        self.instance, self.prediction, self.source = instance, prediction, source
        self.repo, self.trace_dir, self.settings = repo, trace_dir, settings
        self.specs = images.EnvSpecBook(source, repo, instance.base_commit, settings)  # this scoring's only
        self.start = time.monotonic()
        self.findings: list = []
        self.plugins = None
        self.key = ""

    def verdict(self, status: Status, blame: str = "", note: str = "", **fields) -> Verdict:
        return Verdict(
            self.instance.instance_id,
            status == Status.RESOLVED,
            status,
            blame=blame,
            note=note,
            patch_sha256=self.prediction.patch_sha256,
            trace_dir=str(self.trace_dir),
            duration_s=round(time.monotonic() - self.start, 3),
            static_flags=[str(f) for f in self.findings],
            **fields,
        )

    def before_any_run(self) -> Verdict | None:
        inst, patch = self.instance, self.prediction.model_patch
        problems = patches.validate_patch(patch, self.source) or _dependency_problems(
            self.source, self.repo, inst, patch, self.settings
        )
        if problems:
            return self.refused(problems)
        self.findings = static_check.scan(patch, self.source)
        try:
            image_id = _env_image_id(inst, patch, self.specs)
            tooling_problems, self.plugins = _tooling(self.source, inst, patch, self.specs)
        except images.NotBuilt:
            raise  # a lookup-only question (`cached_verdict`): the answer needs the real run
        except ImageBuildError as exc:
            blame = Blame.PATCH if isinstance(exc, PatchBuildError) else Blame.HARNESS
            return self.verdict(Status.IMAGE_BUILD_FAILED, blame, str(exc))
        except Exception as exc:  # the daemon is unreachable: the harness's
            return self.verdict(Status.IMAGE_BUILD_FAILED, Blame.HARNESS, str(exc))
        if tooling_problems:
            note = "the patch changes the test tooling of the image: " + "; ".join(tooling_problems)
            return self.verdict(Status.PATCH_TOUCHES_TESTS, Blame.PATCH, note)
        recipe = recipe_key(self.source)
        self.key = cache_key(
            inst.instance_id, self.prediction.patch_sha256, image_id, recipe, graded_digest(inst)
        )
        return None

    def refused(self, problems) -> Verdict:
        """A patch refused before any container starts (patch_invalid, patch_touches_tests)."""
        note = "; ".join(p.message for p in problems)[:2000]
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        (self.trace_dir / "agent.diff").write_bytes(patches.patch_bytes(self.prediction.model_patch))
        (self.trace_dir / "rejected.txt").write_text(note + "\n")
        return self.verdict(patches.problems_status(problems), Blame.PATCH, note)

    def from_cache(self, hit: Verdict) -> Verdict:
        hit.cached = True
        if hit.trace_dir and Path(hit.trace_dir).exists() and Path(hit.trace_dir) != self.trace_dir:
            shutil.copytree(hit.trace_dir, self.trace_dir, dirs_exist_ok=True)
        hit.trace_dir = str(self.trace_dir)
        return hit

    def run(self, infra_retries: int) -> Verdict:
        total, rows, statuses, mismatch, infra_attempts, image_id, attempts = _attempts(
            self.instance,
            self.prediction,
            self.source,
            self.repo,
            self.trace_dir,
            self.settings,
            infra_retries,
            self.plugins,
            self.specs,
        )
        blocking = static_check.blocking(self.findings, static_check.scan(self.instance.patch, self.source))
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
        return self.verdict(
            total.status,
            str(total.blame),
            "; ".join(filter(None, [total.note, *infra_attempts])),
            f2p_passed=total.f2p_passed,
            f2p_total=total.f2p_total,
            p2p_passed=total.p2p_passed,
            p2p_total=total.p2p_total,
            backend_status=statuses.get("backend"),
            frontend_status=statuses.get("frontend"),
            exit_code_mismatch=mismatch,
            image_id=image_id,
            attempts=attempts,
            tampering=list(dict.fromkeys(total.tampering)),
            tests=rows,
            executed_by=executed_by(),
        )


def _attempts(
    instance, prediction, source, repo, trace_dir, settings, infra_retries, plugins=None, book=None
):
    """Every side of the instance, again while the harness is to blame (at most `infra_retries` more times)."""
    infra_attempts: list[str] = []  # why attempts were not verdicts: kept in the note, beside `attempts`
    image_id = ""
    for attempt in range(1, infra_retries + 2):
        grades, rows, mismatch = [], [], False
        statuses: dict[str, str] = {}
        errors: list[str] = []
        for side in instance.sides():
            g, result, side_rows = _run_side(
                instance, prediction, source, repo, side, trace_dir / str(side), settings, plugins, book
            )
            grades.append(g)
            rows += side_rows
            statuses[str(side)] = str(g.status)
            mismatch |= result.exit_code_mismatch
            image_id = image_id or result.image_id
            if g.infra_failure and result.error:
                errors.append(f"{side}: {result.error}"[:300])
        total = grading.combine(grades)
        if not total.infra_failure:
            break
        infra_attempts.append(
            f"attempt {attempt}: {total.status} ({'; '.join(errors) or 'no error recorded'})"
        )
        log.warning("%s: %s", instance.instance_id, infra_attempts[-1])
    return total, rows, statuses, mismatch, infra_attempts, image_id, attempt


def repo_for(source: SourceRecord, mirror: repos.Mirrors | Path = None, needs: tuple[str, ...] = ()) -> Path:
    """The source's clone; `mirror` is one path or a {source name: path} mapping (`repos.parse_mirrors`);
    `needs`: commits that spare the refresh when the clone has them (`repos.repo_dir`)."""
    mirror = mirror if isinstance(mirror, Path) else repos.mirror_for(source, mirror)
    return repos.repo_dir(source, mirror, needs)
