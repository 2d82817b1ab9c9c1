"""Infrastructure faults that cannot be had on a CI machine, at the docker SDK / engine boundary: a full disk
during an image build, a Docker daemon that does not answer. Stand-ins only for those; the Docker-backed
variants (real kills, a real daemon restart) are in tests/integration/test_faults.py.
"""

from __future__ import annotations

import docker
import pytest
import requests

from tasks_lib import engine
from tasks_lib.core.constants import Outcome, RunStatus, Status
from tasks_lib.core.errors import ImageBuildError, InfraError
from tasks_lib.images import build as images
from tasks_lib.judge import evaluation
from tasks_lib.judge.predictions import Prediction, PredictionFormat

ENOSPC = "write /var/lib/docker/tmp/docker-builder123/deps/requirements.txt: no space left on device"


class _FullDiskAPI:
    """APIClient.build as the daemon answers when its disk is full; records any tagging."""

    def __init__(self, shape: str):
        self.shape = shape
        self.tagged: list[tuple] = []

    def build(self, **kwargs):
        if self.shape == "api_error":  # the daemon could not even store the build context
            raise docker.errors.APIError("500 Server Error", explanation=ENOSPC)

        def stream():
            yield {"stream": "Step 1/9 : ARG BASE\n"}
            if self.shape == "build_error":
                raise docker.errors.BuildError(ENOSPC, build_log=[{"error": ENOSPC}])
            # A RUN step's own write fails; the error names only the step's exit code.
            if self.shape == "step_output":
                yield {"stream": "E: Write error - write (28: No space left on device)\n"}
                yield {"stream": "E: IO Error saving source cache\n"}
                failed = "The command '/bin/sh -c apt-get install -y chromium' returned a non-zero code: 100"
                yield {"errorDetail": {"message": failed}, "error": failed}
                return
            yield {"errorDetail": {"message": ENOSPC}, "error": ENOSPC}

        return stream()

    def tag(self, *args, **kwargs):
        self.tagged.append(args)


class _Images:
    def get(self, tag):
        raise docker.errors.ImageNotFound(tag)


class _FullDiskClient:
    def __init__(self, shape: str):
        self.api = _FullDiskAPI(shape)
        self.images = _Images()


@pytest.mark.parametrize("shape", ["stream_error", "build_error", "api_error", "step_output"])
def test_full_disk_build_is_infrastructure_with_its_log_and_tags_nothing(shape):
    """ENOSPC in the build stream, as a BuildError mid-stream, as the API's 500 on the context upload, or in
    the output of the RUN step that failed (its error names only the exit code):
    always InfraError (the host's failure: an extraction retries it and never keeps it as the PR's outcome,
    a verdict is image_build_failed with the harness to blame), never ImageBuildError (which a season keeps
    as the commit's), naming a build log that holds the daemon's message, and nothing is tagged."""
    client = _FullDiskClient(shape)
    with pytest.raises(InfraError) as err:
        images._build_keyed(
            client, "pbench/env-demo-backend", "f" * 64, {"Dockerfile": b"FROM scratch\n"}, {}, "env-fault"
        )
    assert not isinstance(err.value, ImageBuildError)
    assert "the engine's disk is full" in str(err.value)
    with open(err.value.log_path) as fh:
        assert "no space left on device" in fh.read().lower()
    assert client.api.tagged == []


class _RecipeFailsAPI(_FullDiskAPI):
    """A RUN step of the recipe exits non-zero (a lock that does not install): the commit's failure."""

    def build(self, **kwargs):
        def stream():
            yield {"stream": "Step 8/9 : RUN sh -eu /pbench/install.sh\n"}
            yield {"stream": "error: Failed to parse `uv.lock`\n"}
            yield {"error": "The command '/bin/sh -c sh -eu /pbench/install.sh' returned a non-zero code: 2"}

        return stream()


def test_a_recipe_that_fails_is_still_the_commits_image_build_error():
    client = _FullDiskClient("stream_error")
    client.api = _RecipeFailsAPI("stream_error")
    with pytest.raises(ImageBuildError) as err:
        images._build_keyed(
            client, "pbench/env-demo-backend", "e" * 64, {"Dockerfile": b"FROM scratch\n"}, {}, "env-fault"
        )
    assert "returned a non-zero code: 2" in str(err.value)


class _InfoClient(_FullDiskClient):
    def __init__(self, root):
        super().__init__("stream_error")
        self.root = root
        self.api.build = self._never

    def info(self):
        return {"DockerRootDir": str(self.root)}

    def _never(self, **kwargs):
        raise AssertionError("no build may start on a disk under PBENCH_MIN_FREE_GB")


def _build_on(root):
    return images._build_keyed(
        _InfoClient(root), "pbench/env-demo-backend", "d" * 64, {"Dockerfile": b"FROM scratch\n"}, {}, "x"
    )


def test_a_build_is_refused_before_it_starts_when_the_engine_disk_is_short(tmp_path, monkeypatch):
    """The engine's data root has less free than PBENCH_MIN_FREE_GB: InfraError naming the folder, the free
    space and how to free some, before any build starts; with the threshold met (or 0) the build goes on."""
    import shutil

    free_gb = shutil.disk_usage(tmp_path).free / 2**30
    monkeypatch.setenv("PBENCH_MIN_FREE_GB", str(free_gb * 4 + 1))
    with pytest.raises(InfraError) as err:
        _build_on(tmp_path)
    assert str(tmp_path) in str(err.value) and "PBENCH_MIN_FREE_GB" in str(err.value)
    assert "pbench images prune" in str(err.value)
    monkeypatch.setenv("PBENCH_MIN_FREE_GB", "0")
    with pytest.raises(InfraError, match="no build may start"):  # the build was started
        _build_on(tmp_path)


@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("PBENCH_MIN_FREE_GB", "lots", "a number"),
        ("PBENCH_CPUS", "two", "a number"),
        ("PBENCH_PIDS_LIMIT", "1.5", "a whole number"),
        ("PBENCH_DOCKER_TIMEOUT", "5m", "a whole number"),
        ("PBENCH_SERVICE_READY_TIMEOUT", "soon", "a whole number"),
    ],
)
def test_a_numeric_setting_that_is_not_a_number_is_named(monkeypatch, name, value, what):
    """A bad number in the environment is the operator's input (InputError, exit 2) naming the setting, never
    a ValueError traceback from the middle of a season."""
    from tasks_lib.core.config import Settings
    from tasks_lib.core.errors import InputError

    monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match=f"{name}: '{value}' is not {what}$"):
        Settings.from_env()


F2P, P2P = "tests/test_items.py::test_new", "tests/test_items.py::test_old"
PATCH = (
    "diff --git a/backend/app/main.py b/backend/app/main.py\n--- a/backend/app/main.py\n"
    "+++ b/backend/app/main.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
)


def _score(monkeypatch, tmp_path, unreachable_attempts: int, seen: list | None = None):
    """score_instance with an engine whose first `unreachable_attempts` calls find no Docker daemon
    (and which notes in `seen` what its log folder held when it was called)."""
    from tasks_lib.sources.record import load_source

    calls = []

    def run_tests(request, settings=None):
        calls.append(request.label)
        if seen is not None:
            seen.append(sorted(p.name for p in request.log_dir.iterdir()))
        if len(calls) <= unreachable_attempts:
            raise requests.exceptions.ConnectionError(
                "('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))"
            )
        return engine.RunResult(
            RunStatus.COMPLETED, {F2P: Outcome.PASSED, P2P: Outcome.PASSED}, suite_ran=True, exit_code=0
        )

    monkeypatch.setattr(engine, "run_tests", run_tests)
    monkeypatch.setattr(evaluation, "_env_image_id", lambda *args: "sha256:" + "1" * 64)
    # No repository here: the dependency files and the test tooling are not what these tests are about.
    monkeypatch.setattr(evaluation, "_dependency_problems", lambda *args: [])
    monkeypatch.setattr(evaluation, "_tooling", lambda *args: ([], None))
    instance = {
        "instance_id": "acme__app-1",
        "base_commit": "a" * 40,
        "test_patch": "",
        "fail_to_pass": {"backend": [F2P]},
        "pass_to_pass": {"backend": [P2P]},
    }
    cache = evaluation.VerdictCache(tmp_path / "verdicts")
    verdict = evaluation.score_instance(
        instance,
        Prediction("acme__app-1", "m", PATCH, PredictionFormat.DIFF),
        load_source("demo"),
        tmp_path / "repo.git",
        tmp_path / "trace",
        cache=cache,
        infra_retries=2,
    )
    return verdict, calls, cache


def test_unreachable_daemon_is_an_infra_attempt_retried_and_recorded(monkeypatch, tmp_path):
    """An engine call that cannot reach Docker (daemon stopped or restarting) is an infrastructure attempt,
    not a crashed task: retried, and the verdict says why it took two attempts."""
    verdict, calls, _ = _score(monkeypatch, tmp_path, unreachable_attempts=1)
    assert verdict.status == Status.RESOLVED and verdict.resolved and verdict.attempts == len(calls) == 2
    assert verdict.note.startswith("attempt 1: infra_error (backend: ConnectionError: ")


def test_daemon_down_for_every_attempt_is_an_uncached_infra_verdict(monkeypatch, tmp_path):
    """When every attempt fails to reach Docker, the verdict is infra_error (its own column, never the
    model's failure), names each attempt's error, and is not cached: a rerun scores it again."""
    verdict, calls, cache = _score(monkeypatch, tmp_path, unreachable_attempts=3)
    assert verdict.status == Status.INFRA_ERROR and verdict.infra_failure and not verdict.resolved
    assert verdict.attempts == len(calls) == 3
    assert [part.split(" (")[0] for part in verdict.note.split("; ")] == [
        "attempt 1: infra_error",
        "attempt 2: infra_error",
        "attempt 3: infra_error",
    ]
    assert not list(cache.root.glob("*/*.json"))


def test_an_engine_run_never_starts_in_a_folder_holding_an_earlier_runs_results(monkeypatch, tmp_path):
    """The engine reads result.json / junit.xml from the side's log folder after copying the container's
    outputs in: when a container dies before writing them (killed, OOM), a complete result.json left by an
    earlier run of the same trace folder (an earlier attempt, a rerun of the run id, a reused
    `pbench score --out`) must not be there to be read as this run's."""
    stale = tmp_path / "trace" / "backend"
    stale.mkdir(parents=True)
    (stale / "result.json").write_text('{"status": "completed"}')
    (stale / "junit.xml").write_text("<testsuite/>")
    seen: list = []
    _score(monkeypatch, tmp_path, unreachable_attempts=0, seen=seen)
    assert seen == [["agent.diff", "test_patch.diff"]]


def test_a_refreshing_cache_misses_every_lookup_and_still_writes(monkeypatch, tmp_path):
    """Rule (`--no-cache`): a cache opened with refresh=True answers no lookup, so the instance is scored
    again, and keeps the fresh verdict, which the next normal lookup finds."""
    from tasks_lib.sources.record import load_source

    verdict, calls, cache = _score(monkeypatch, tmp_path, unreachable_attempts=0)
    assert verdict.resolved and len(calls) == 1
    refreshing = evaluation.VerdictCache(cache.root, refresh=True)
    again = evaluation.score_instance(
        {
            "instance_id": "acme__app-1",
            "base_commit": "a" * 40,
            "test_patch": "",
            "fail_to_pass": {"backend": [F2P]},
            "pass_to_pass": {"backend": [P2P]},
        },
        Prediction("acme__app-1", "m", PATCH, PredictionFormat.DIFF),
        load_source("demo"),
        tmp_path / "repo.git",
        tmp_path / "trace2",
        cache=refreshing,
    )
    assert len(calls) == 2 and not again.cached
    assert refreshing.get("any") is None
    hit = next(iter(cache.root.rglob("*.json")))
    assert evaluation.VerdictCache(cache.root).get(hit.stem) is not None
