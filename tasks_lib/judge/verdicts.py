"""The verdict of one (instance, prediction) and the cache that keeps verdicts by content, not by run id."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.constants import HARNESS_VERSION, JUDGE_VERSION, Blame, Status, default_blame


@dataclass
class TestRow:
    __test__ = False  # a record, not a pytest class

    side: str
    test_id: str
    expected: str  # fail_to_pass | pass_to_pass
    outcome: str  # an Outcome, or "missing"
    passed: bool


@dataclass
class Verdict:
    instance_id: str
    resolved: bool
    status: Status
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
    executed_by: str = ""  # host:pid[@DOCKER_HOST] that ran the containers (a Dask worker, the flow)
    trace_dir: str = ""
    note: str = ""
    blame: str = ""  # "patch" (exit 1) or "harness" (exit 2, retried); "" when resolved
    tampering: list[str] = field(default_factory=list)  # what the guards saw: never a pass
    static_flags: list[str] = field(default_factory=list)  # the static check of the patch (static_check.py)
    tests: list[TestRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.blame = Blame(self.blame or "")

    @property
    def infra_failure(self) -> bool:
        return (self.blame or default_blame(self.status)) == Blame.HARNESS

    @property
    def kind(self) -> str:
        """How a run's progress counts it: resolved, failed (the model's) or errored (the harness's)."""
        return "resolved" if self.resolved else ("errored" if self.infra_failure else "failed")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        data = dict(data)
        data["tests"] = [TestRow(**t) for t in data.get("tests", [])]
        return cls(**data)


def cache_key(instance_id: str, patch_sha: str, image_id: str, recipe: str = "", graded: str = "") -> str:
    """`recipe`: what else decides a run (`harness_id.recipe_key`: the source record with its prestart and
    test commands, the runner and container recipes), so that a change to any of them is never answered by a
    verdict of the harness before it; `graded`: what of the instance decides its runs and its grade
    (`graded_digest`), so that an instance extracted again under the same id (other labels, another test
    patch) is never answered by the verdict of the one before; `JUDGE_VERSION`, so that a verdict judged by
    older rules is never reused."""
    parts = f"{instance_id}\0{patch_sha}\0{image_id}\0{HARNESS_VERSION}\0judge {JUDGE_VERSION}" + (
        f"\0{recipe}" if recipe else ""
    )
    return hashlib.sha256((parts + (f"\0graded {graded}" if graded else "")).encode()).hexdigest()


def graded_digest(instance) -> str:
    """sha256 of what of a `TaskInstance` decides its runs and its grade: the repository, the base commit, the
    test patch, FAIL_TO_PASS and PASS_TO_PASS of each side. Not the statement, the hints or the reference
    patch: a verdict does not depend on them."""
    what = {
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "test_patch": hashlib.sha256(instance.test_patch.encode("utf-8", "surrogateescape")).hexdigest(),
        "tests": {str(side): instance.tests(side) for side in ("backend", "frontend")},
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class VerdictCache:
    """Verdicts on disk, keyed by instance id + patch hash + image id + harness version and recipe."""

    def __init__(self, root: Path | None = None, *, refresh: bool = False):
        """`refresh`: every lookup misses (the run is scored again), every fresh verdict is still written."""
        self.root = root or paths.verdicts_dir()
        self.refresh = refresh

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Verdict | None:
        p = self._path(key)
        if self.refresh or not p.exists():
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
