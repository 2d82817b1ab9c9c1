"""Faults and determinism (reliability campaign): real kills, a real restart, injected full disks, repeats.

Every test here scores gold (and one wrong) patches of the demo corpus with the real engine, under a cache
folder of its own: verdicts cached earlier in the session (test_evaluation_demo scores the same gold
patches) must not answer for a test whose point is that the containers really run.

The Docker-daemon restart test restarts dockerd, which stops every container on this machine (it refuses
to while containers of another owner run). It carries the extra marker `fault_daemon` and runs only when
asked, never in CI:

    PBENCH_FAULT_DAEMON=1 .venv/bin/python -m pytest tests/integration/test_faults.py -m fault_daemon -q

It restarts the dockerd of /var/run/docker.pid with the command line it was started with (./dev:
`nohup dockerd >data/cache/setup/dockerd.log 2>&1 &`). For a daemon of its own, also set DOCKER_HOST,
PBENCH_FAULT_DOCKERD_PIDFILE and PBENCH_FAULT_DOCKERD_LOG.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import docker
import pandas as pd
import pytest

from tasks_lib.core.constants import LABEL_OWNER, Status
from tasks_lib.sources.demo_repo import DEMO_PRS

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BUGFIX = f"prototypebench__demo-fullstack-{DEMO_PRS['bugfix']}"
FEATURE = f"prototypebench__demo-fullstack-{DEMO_PRS['feature']}"
LOCK_CHANGE = f"prototypebench__demo-fullstack-{DEMO_PRS['collection_error']}"  # its patch adds a package
ENOSPC = "write /opt/venv/lib/python3.11/site-packages/slugify/__init__.py: no space left on device"


def _instance(iid: str) -> dict:
    from tasks_lib.corpus import load as corpus

    found = [i for i in corpus.load_corpus("demo") if i["instance_id"] == iid]
    assert found, f"{iid} is not in the curated demo corpus (see the season's extraction.parquet)"
    return found[0]


def _prediction(iid: str, patch: str, model: str = "gold"):
    from tasks_lib.judge.predictions import Prediction, PredictionFormat

    return Prediction(iid, model, patch, PredictionFormat.DIFF)


def _wrong(patch: str) -> str:
    """The bugfix's reference patch with the wrong error message: its FAIL_TO_PASS test keeps failing."""
    assert '"Item not found"' in patch
    return patch.replace('"Item not found"', '"Missing"')


def _owner_filter() -> dict:
    return {"label": f"{LABEL_OWNER}={os.environ['PBENCH_OWNER']}"}


def _evaluate(run_id: str, ids: list[str], **kw) -> dict:
    from flows.evaluation import run_evaluation

    return run_evaluation(
        max_workers=2,
        dataset="demo",
        predictions="gold",
        model="gold",
        model_cutoff="2025-06-01",
        run_id=run_id,
        ids=ids,
        **kw,
    )


def _assert_one_row_per_instance(out_dir: Path, ids: list[str]) -> pd.DataFrame:
    """results.parquet: exactly one row per instance; tests.parquet: exactly one row per graded test."""
    df = pd.read_parquet(out_dir / "results.parquet")
    assert sorted(df["instance_id"]) == sorted(ids), list(df["instance_id"])
    tests = pd.read_parquet(out_dir / "tests.parquet")
    assert not tests.duplicated(["instance_id", "side", "test_id"]).any()
    assert len(tests) == int((df["f2p_total"] + df["p2p_total"]).sum())
    return df.set_index("instance_id")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """PBENCH_CACHE_DIR of this test only (its verdict cache starts empty); the clones are copied over so
    that nothing has to be generated again. Subprocesses inherit it through the environment."""
    from tasks_lib.core import paths

    session = paths.cache_dir()
    cache = tmp_path / "cache"
    for sub in ("sources", "repos"):
        if (session / sub).is_dir():
            shutil.copytree(session / sub, cache / sub, symlinks=True)
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(cache))
    return cache


class _TestContainerKiller(threading.Thread):
    """From outside the engine, SIGKILLs the first test container of this session that is running."""

    def __init__(self):
        super().__init__(daemon=True)
        self.client = docker.from_env(timeout=60)
        self.done = threading.Event()
        self.killed: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.done.is_set() and not self.killed:
                for c in self.client.containers.list(filters=_owner_filter()):  # running ones only
                    if not c.name.endswith("-tests"):
                        continue
                    time.sleep(1)  # mid-run: the runner is applying patches or running the tests by now
                    try:
                        c.kill()
                    except docker.errors.APIError:  # it finished first: wait for the next one
                        continue
                    self.killed.append(c.name)
                    break
                self.done.wait(0.2)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=30)
        self.client.close()


def test_test_container_killed_mid_run_is_retried_as_infrastructure(curated_demo, fresh_cache):
    """A test container SIGKILLed from outside during an evaluation is the harness's trouble, not the
    model's: that instance is retried (attempts = 2) and resolves, the other one is untouched, and the
    run has exactly one row per instance, none labelled as a model failure."""
    ids = [BUGFIX, FEATURE]
    killer = _TestContainerKiller()
    killer.start()
    try:
        report = _evaluate(f"faults-killed-{uuid.uuid4().hex[:8]}", ids)
    finally:
        killer.stop()
    assert killer.error is None and len(killer.killed) == 1, killer.error or "no test container seen running"
    df = _assert_one_row_per_instance(Path(report["out_dir"]), ids)
    assert df["resolved"].all() and (df["status"] == Status.RESOLVED).all(), df["status"].to_dict()
    assert not df["infra_failure"].any() and report["infra_failures"] == 0
    assert sorted(df["attempts"]) == [1, 2], df["attempts"].to_dict()
    retried = df[df["attempts"] == 2].iloc[0]
    assert "attempt 1: infra_error" in retried["note"], retried["note"]
    assert not df["cached"].any()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.pbench", *args]


def test_flow_process_killed_after_the_first_verdict_resumes(curated_demo, fresh_cache, container_counter):
    """`pbench evaluate` SIGKILLed (with its process group: the ephemeral Prefect server goes too) right
    after the first verdict is persisted, then started again with the same --run-id: the rerun takes the
    scored instance from the verdict cache (no container for it), runs the other one, and writes one row
    per instance, all resolved. The killed run's containers are what `pbench cleanup` removes."""
    from tasks_lib.core import paths

    ids = [BUGFIX, FEATURE]
    run_id = f"faults-resume-{uuid.uuid4().hex[:8]}"  # one id for both invocations
    cmd = _cli(
        "evaluate",
        "--predictions",
        "gold",
        "--model",
        "gold",
        "--model-cutoff",
        "2025-06-01",
        "--run-id",
        run_id,
        "--dataset",
        "demo",
        "--max-workers",
        "1",
        *[a for iid in ids for a in ("--id", iid)],
    )
    verdicts = fresh_cache / "verdicts"
    with open(fresh_cache.parent / "killed.log", "w") as log:
        first = subprocess.Popen(
            cmd, cwd=ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 900
            while not list(verdicts.glob("*/*.json")):
                assert first.poll() is None, (fresh_cache.parent / "killed.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no verdict persisted in 900 s"
                time.sleep(0.2)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=60)
    persisted = {json.loads(p.read_text())["instance_id"] for p in verdicts.glob("*/*.json")}
    assert len(persisted) == 1 and first.returncode == -signal.SIGKILL
    out_dir = paths.runs_dir() / run_id
    assert (out_dir / "run.json").exists() and not (out_dir / "results.parquet").exists()

    try:
        with container_counter() as counted:
            again = subprocess.run(
                cmd, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900
            )
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        df = _assert_one_row_per_instance(out_dir, ids)
        assert df["resolved"].all() and not df["infra_failure"].any()
        assert set(df.index[df["cached"]]) == persisted
        assert len(counted.created) == 2, counted.created  # database + tests of the unscored instance only
    finally:  # the killed run's containers go whatever happened above: later tests count theirs
        res = subprocess.run(_cli("cleanup"), cwd=ROOT, env=dict(os.environ), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    client = docker.from_env(timeout=60)
    try:
        assert not client.containers.list(all=True, filters=_owner_filter())
    finally:
        client.close()


def test_sigterm_stops_a_threaded_evaluation_within_seconds(curated_demo, fresh_cache, tmp_path):
    """`pbench evaluate` scores on a worker thread; a signal interrupts only the main thread. With a patch whose
    route hangs (the source's timeout is 600 s), SIGTERM while its test container runs: the process exits 130
    within 30 s (not after the timeout), and no container of the run is left."""
    from attack_kit import Task

    hang = Task(BUGFIX).hanging_route()
    preds = tmp_path / "hang.jsonl"
    preds.write_text(
        json.dumps({"instance_id": BUGFIX, "model_name_or_path": "hang", "model_patch": hang}) + "\n"
    )
    cmd = _cli(
        "evaluate", "--predictions", str(preds), "--model", "hang", "--model-cutoff", "2025-06-01",
        "--dataset", "demo", "--id", BUGFIX, "--max-workers", "1", "--run-id", f"sigterm-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    client = docker.from_env(timeout=60)
    log = tmp_path / "sigterm.log"
    # Another test's leftovers are not this run's: only containers made after the start count.
    before = {c.name for c in client.containers.list(all=True, filters=_owner_filter())}
    try:
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 600
            while not [
                c
                for c in client.containers.list(filters=_owner_filter())
                if c.name.endswith("-tests") and c.name not in before
            ]:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, "no test container ran in 600 s"
                time.sleep(0.5)
            time.sleep(5)  # the tests are under way, the route hangs
            asked = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
            took = time.monotonic() - asked
        assert rc == 130, log.read_text()[-3000:]
        assert took < 30, f"exited {took:.1f} s after SIGTERM"
        time.sleep(2)
        left = [
            c.name for c in client.containers.list(all=True, filters=_owner_filter()) if c.name not in before
        ]
        assert left == [], left
    finally:
        subprocess.run(_cli("cleanup"), cwd=ROOT, env=dict(os.environ), capture_output=True)
        client.close()


def _full_disk(real_build, repo: str, shape: str):
    """docker's APIClient.build for `repo` as the daemon answers on ENOSPC: an error in the build stream
    (a layer that cannot be written) or a BuildError raised mid-stream; other repositories build for real."""

    def build(**kwargs):
        if not str(kwargs.get("tag", "")).startswith(repo + ":"):
            return real_build(**kwargs)

        def stream():
            yield {"stream": "Step 1/9 : ARG BASE\n"}
            yield {"stream": "Step 8/9 : RUN sh -eu /pbench/install.sh\n"}
            if shape == "raise":
                raise docker.errors.BuildError(ENOSPC, build_log=[{"error": ENOSPC}])
            yield {"errorDetail": {"message": ENOSPC}, "error": ENOSPC}

        return stream()

    return build


def test_full_disk_during_an_env_image_build_is_infrastructure(
    curated_demo, demo_repo, docker_engine, monkeypatch, tmp_path
):
    """ENOSPC while building an environment image nobody has built yet: the verdict is image_build_failed
    (the infrastructure column, never the model's failure), not cached, its note names the build log that
    holds the daemon's message, and no image is tagged. With the disk "freed", the same call builds the
    image and resolves."""
    from tasks_lib.corpus import load as corpus
    from tasks_lib.formats import patches
    from tasks_lib.images import build as images
    from tasks_lib.judge import evaluation, reporting

    inst = _instance(LOCK_CHANGE)
    assert "backend/requirements.txt" in patches.changed_paths(inst["patch"])
    # A source name of its own keys an image that does not exist yet; its build context is the demo's, so
    # the build that finally succeeds reuses the daemon's layer cache and takes seconds, not a pip install.
    source = dataclasses.replace(corpus.source_for(inst), name=f"demo-fault-{uuid.uuid4().hex[:8]}")
    repo = f"{images.ENV_REPO_PREFIX}-{source.name}-backend"
    prediction = _prediction(LOCK_CHANGE, inst["patch"])
    cache = evaluation.VerdictCache(tmp_path / "verdicts")
    real_build = docker_engine.api.build
    try:
        for shape in ("stream_error", "raise"):
            monkeypatch.setattr(docker_engine.api, "build", _full_disk(real_build, repo, shape))
            v = evaluation.score_instance(inst, prediction, source, demo_repo, tmp_path / shape, cache=cache)
            assert v.status == Status.IMAGE_BUILD_FAILED and not v.resolved and v.infra_failure, v.note
            row = reporting.result_row("r", "gold", date(2025, 6, 1), inst, v)
            assert row["infra_failure"] and not row["resolved"]
            assert "no space left on device" in v.note
            build_log = Path(re.search(r"\(log: (.+?)\)", v.note).group(1))
            assert "no space left on device" in build_log.read_text()
            assert docker_engine.images.list(name=repo) == []
            assert not list((tmp_path / "verdicts").glob("*/*.json"))
        monkeypatch.setattr(docker_engine.api, "build", real_build)
        v = evaluation.score_instance(inst, prediction, source, demo_repo, tmp_path / "freed", cache=cache)
        assert v.status == Status.RESOLVED and v.resolved and not v.cached, v.note
        # The run's image is the patched lock's; the base lock's is built beside it (its test tooling is what
        # the patched image's is checked against).
        built = docker_engine.images.list(name=repo)
        assert v.image_id in [i.id for i in built] and len(built) == 2
    finally:
        for image in docker_engine.images.list(name=repo):
            for tag in image.tags:
                docker_engine.images.remove(tag)


def _same(values: list) -> bool:
    return all(v == values[0] for v in values)


def test_same_patch_gets_the_same_verdict_and_outcomes_five_times(curated_demo, demo_repo, tmp_path):
    """Determinism: the bugfix instance scored 5 times with its reference patch and 5 times with a wrong
    one, each time in new containers with an empty verdict cache, gives one verdict per patch and the same
    outcome for every test the run reported (graded or not). (TZ, PYTHONHASHSEED, LANG and LC_ALL inside
    the test container: test_engine.py::test_sandbox_has_no_internet_no_socket_no_host_env.)"""
    from tasks_lib.corpus import load as corpus
    from tasks_lib.judge import evaluation

    inst = _instance(BUGFIX)
    source = corpus.source_for(inst)
    patches = {"gold": inst["patch"], "wrong": _wrong(inst["patch"])}

    def score(kind: str, i: int):
        return evaluation.score_instance(
            inst,
            _prediction(BUGFIX, patches[kind], kind),
            source,
            demo_repo,
            tmp_path / f"{kind}-{i}",
            cache=evaluation.VerdictCache(tmp_path / f"verdicts-{kind}-{i}"),
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {kind: [pool.submit(score, kind, i) for i in range(5)] for kind in patches}
        verdicts = {kind: [f.result() for f in fs] for kind, fs in futures.items()}

    for kind, vs in verdicts.items():
        assert not any(v.cached for v in vs)
        summary = [(v.status, v.resolved, v.f2p_passed, v.f2p_total, v.p2p_passed, v.p2p_total) for v in vs]
        assert _same(summary), (kind, summary)
        assert _same([[dataclasses.astuple(t) for t in v.tests] for v in vs]), kind
        outcomes = [json.loads((Path(v.trace_dir) / "backend" / "run.json").read_text())["tests"] for v in vs]
        assert outcomes[0] and _same(outcomes), kind
    gold, wrong = verdicts["gold"][0], verdicts["wrong"][0]
    assert gold.status == Status.RESOLVED and gold.f2p_passed == gold.f2p_total == 1
    assert wrong.status == Status.TESTS_FAILED and wrong.f2p_passed == 0
    assert wrong.p2p_passed == wrong.p2p_total > 0


# ----------------------------------------------------------------------------- Docker daemon restart

# dockerd as ./dev starts it (`nohup dockerd >data/cache/setup/dockerd.log 2>&1 &`, pid in dockerd's default
# pidfile); another daemon (DOCKER_HOST) is named by its pidfile and log through these two variables.
DOCKERD_PIDFILE = os.environ.get("PBENCH_FAULT_DOCKERD_PIDFILE", "/var/run/docker.pid")
DOCKERD_LOG = os.environ.get(
    "PBENCH_FAULT_DOCKERD_LOG", str(ROOT / "data" / "cache" / "setup" / "dockerd.log")
)


def _foreign_containers(client) -> list[str]:
    """Running containers that are not this session's: a daemon restart would stop them."""
    mine = os.environ["PBENCH_OWNER"]
    return [c.name for c in client.containers.list() if c.labels.get(LABEL_OWNER) != mine]


def _docker_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _restart_dockerd() -> None:
    """SIGTERM to dockerd, wait for it to exit, start it again with the same command line (log appended),
    wait for `docker info`."""
    pid = int(Path(DOCKERD_PIDFILE).read_text().strip())
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    cwd = os.readlink(f"/proc/{pid}/cwd")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while _alive(pid):
        assert time.monotonic() < deadline, "dockerd did not stop in 120 s"
        time.sleep(0.5)
    Path(DOCKERD_LOG).parent.mkdir(parents=True, exist_ok=True)
    command = f"nohup {shlex.join(argv)} >>{shlex.quote(DOCKERD_LOG)} 2>&1 &"
    subprocess.run(["sh", "-c", command], cwd=cwd, check=True)
    deadline = time.monotonic() + 120
    while not _docker_answers():
        assert time.monotonic() < deadline, f"dockerd did not come back in 120 s (log: {DOCKERD_LOG})"
        time.sleep(1)


class _DaemonRestarter(threading.Thread):
    """Restarts dockerd once a test container of this session runs, unless someone else's containers run."""

    def __init__(self):
        super().__init__(daemon=True)
        self.restarted = False
        self.refused: list[str] = []
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        client = docker.from_env(timeout=60)
        try:
            while not self.done.is_set():
                running = client.containers.list(filters=_owner_filter())
                if any(c.name.endswith("-tests") for c in running):
                    self.refused = _foreign_containers(client)
                    if not self.refused:
                        _restart_dockerd()
                        self.restarted = True
                    return
                self.done.wait(0.2)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            client.close()


@pytest.mark.fault_daemon
@pytest.mark.skipif(
    os.environ.get("PBENCH_FAULT_DAEMON") != "1",
    reason="restarts dockerd (stops every container on the machine): set PBENCH_FAULT_DAEMON=1",
)
def test_docker_daemon_restarted_mid_evaluation(curated_demo, fresh_cache, docker_engine):
    """dockerd stopped (SIGTERM) and started again while two instances are being scored: the run still
    finishes, every row is either the right verdict (gold: resolved) or labelled infrastructure, and a
    rerun of the same run id completes the infrastructure rows (they were never cached)."""
    from tasks_lib import engine
    from tasks_lib.core import docker_client

    others = _foreign_containers(docker_engine)
    if others:
        pytest.skip(f"other containers are running, not restarting the daemon: {others[:5]}")
    ids = [BUGFIX, FEATURE]
    run_id = f"faults-daemon-{uuid.uuid4().hex[:8]}"
    restarter = _DaemonRestarter()
    restarter.start()
    try:
        first = _evaluate(run_id, ids)
    finally:
        restarter.done.set()
        restarter.join(timeout=300)
        docker_client.reset()
    assert restarter.error is None, restarter.error
    if not restarter.restarted:
        pytest.skip(
            f"other containers started meanwhile, the daemon was not restarted: {restarter.refused[:5]}"
        )
    df = _assert_one_row_per_instance(Path(first["out_dir"]), ids)
    assert ((df["attempts"] > 1) | df["infra_failure"]).any(), "the restart did not reach the run"
    assert (df["resolved"] | df["infra_failure"]).all(), df[["status", "note"]].to_dict()
    assert (df["resolved"] == (df["status"] == Status.RESOLVED)).all()

    # Stacks whose removal failed while the daemon was down are this owner's leftovers: cleanup removes them.
    engine.cleanup_leftovers()
    again = _evaluate(run_id, ids)
    df2 = _assert_one_row_per_instance(Path(again["out_dir"]), ids)
    assert df2["resolved"].all() and not df2["infra_failure"].any(), df2[["status", "note"]].to_dict()
    assert set(df2.index[df2["cached"]]) == set(df.index[df["resolved"]])


def test_a_stop_drops_an_image_build_in_progress(docker_engine, base_images, tmp_path):
    """Rule: a stop asked for while an image builds ends the build within seconds (a stopped curate used to
    wait for the whole build of an environment image in its worker thread), and the daemon cancels it: no
    build container keeps running and no image is tagged."""
    from tasks_lib.core import stopping
    from tasks_lib.images import build as images

    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_images['base'].tag}\n"
        # unique per run: never a build-cache hit
        f"RUN echo {uuid.uuid4().hex} && for i in $(seq 1 120); do echo tick $i; sleep 1; done\n"
    )
    tag = f"pbench/stop-test:{uuid.uuid4().hex[:12]}"
    errors: list[BaseException] = []

    def build():
        try:
            images._build(docker_engine, tmp_path, tag, "k", {}, tmp_path / "build.log")
        except BaseException as exc:  # noqa: BLE001 - the Interrupted is what we want to see
            errors.append(exc)

    t = threading.Thread(target=build)
    t.start()
    try:
        log = tmp_path / "build.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and "tick 3" in log.read_text()):
            assert not errors and time.monotonic() < deadline, (errors, log.exists() and log.read_text())
            time.sleep(0.5)
        stopped_at = time.monotonic()
        stopping.request_stop()
        t.join(15)
        assert not t.is_alive() and time.monotonic() - stopped_at < 10
        assert errors and isinstance(errors[0], stopping.Interrupted)
    finally:
        stopping.reset()
        t.join(120)
    time.sleep(3)
    running = [
        c for c in docker_engine.containers.list() if "tick" in " ".join(c.attrs["Config"]["Cmd"] or [])
    ]
    assert running == []
    with pytest.raises(docker.errors.ImageNotFound):
        docker_engine.images.get(tag)
