"""Environment images through a real registry, two Docker engines as two hosts (issue 41).

The project's set-up starts both (`./dev registry`: Debian's docker-registry, distribution 2.8, on 127.0.0.1;
`./dev engine`: a second dockerd with its own socket, data root and bridge). Engine A is the default one, B the
second. A builds and pushes, B pulls (the daemon's events show a pull and no build), the pulled image has the id of
the built one, and so the verdict of an instance is the same on both, and A's cached verdict is found from B
through the registry's digests without a pull. Last, a Dask cluster with one worker per engine evaluates the
demo's backend instances.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import engines_kit
import pandas as pd
import pytest
from attack_kit import BUGFIX, Task

from tasks_lib.core import docker_client
from tasks_lib.core.config import Settings
from tasks_lib.core.constants import LABEL_OWNER
from tasks_lib.images import build as images
from tasks_lib.images import lineage, registry
from tasks_lib.judge import evaluation

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ENGINE_B = 8  # far from the engines an operator starts by hand (./dev engine start 1, 2, ...)
PROBE_REPO = "pbench/registry-probe"  # not an environment image: `pbench images usage` and prune never see it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def services(docker_engine, base_images):
    """The registry and engine B for this module, removed afterwards (B's data root included)."""
    root = Path(tempfile.mkdtemp(prefix="pbr-", dir="/tmp"))  # short: a unix socket's path has a length limit
    try:
        with (
            engines_kit.registry(root / "registry", _free_port()) as address,
            engines_kit.engine(ENGINE_B, root / "engines") as b,
        ):
            yield SimpleNamespace(address=address, remote=registry.Registry.parse(address), b=b)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def with_registry(services, monkeypatch):
    monkeypatch.setenv("PBENCH_REGISTRY", services.address)
    return services


@contextlib.contextmanager
def on_engine(monkeypatch, docker_host: str):
    """This process talks to another engine (as a worker of that host would) until the block ends."""
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    docker_client.reset()
    try:
        yield docker_client.get()
    finally:
        monkeypatch.delenv("DOCKER_HOST")
        docker_client.reset()


class Events:
    """What an engine did between two instants, from its own event stream: pulls, and containers created (an
    image build runs each step in a container of its own, the build's egress proxy in another)."""

    def __init__(self, client):
        self.client = client

    def __enter__(self):
        time.sleep(1)  # events are second-resolution, `since` inclusive: the window opens at the next second
        self.since = int(time.time()) + 1
        time.sleep(self.since - time.time() + 0.05)
        return self

    def __exit__(self, *exc):
        time.sleep(1)
        events = list(self.client.events(since=self.since, until=int(time.time()) + 1, decode=True))
        self.pulled = [
            e["Actor"]["ID"] for e in events if e.get("Type") == "image" and e.get("Action") == "pull"
        ]
        self.created = [
            e["Actor"].get("Attributes", {})
            for e in events
            if e.get("Type") == "container" and e.get("Action") == "create"
        ]
        return False

    def builds(self) -> list[dict]:
        """Containers no engine run of ours created (a build's steps), or a build's egress proxy."""
        owner = os.environ["PBENCH_OWNER"]
        return [
            a for a in self.created if a.get(LABEL_OWNER) != owner or a.get("name", "").endswith("-egress")
        ]


def _harness_tags() -> list[str]:
    """A's root filesystem, base and Postgres images: what every other image of an engine stands on."""
    refs = images.bootstrap()
    return [
        f"{images.ROOTFS_REPO}:{Settings.from_env().debian_suite}",
        refs["base"].tag,
        refs["postgres"].tag,
    ]


def _probe(client, key: str, remote, base_tag: str):
    context = {"Dockerfile": b"ARG BASE\nFROM ${BASE}\nRUN echo probe > /probe\n"}
    return images._build_keyed(client, PROBE_REPO, key, context, {"BASE": base_tag}, "probe", remote=remote)


def test_an_image_built_and_pushed_on_a_is_pulled_on_b_with_the_same_id(
    with_registry, docker_engine, base_images, monkeypatch
):
    """A run on A that misses an image builds it and pushes it; on B the same content key is pulled, not built
    (B's events: a pull, no container), and the pulled image's id is the built one's (the config digest, which
    the registry's manifest names): what the verdict and extraction keys hold keeps its meaning. Before the
    pull, a lookup-only question on B already knows that id from the registry, and pulls nothing."""
    remote = with_registry.remote
    key = hashlib.sha256(f"probe {os.environ['PBENCH_OWNER']}".encode()).hexdigest()
    built = _probe(docker_engine, key, remote, base_images["base"].tag)
    try:
        assert built.built and not built.pulled
        assert remote.manifest(built.tag).config == built.id
        with on_engine(monkeypatch, with_registry.b) as b:
            with images.lookup_only():
                known = _probe(b, key, remote, base_images["base"].tag)
            assert known.id == built.id and not known.built and registry.local_id(b, built.tag) is None
            with Events(b) as seen:
                pulled = _probe(b, key, remote, base_images["base"].tag)
            assert pulled.pulled and not pulled.built and pulled.id == built.id
            assert seen.pulled == [f"{remote.address}/{built.tag}"] and seen.created == []
            assert b.images.get(built.tag).labels[images.KEY_LABEL] == key
            kinds = [(r["kind"], r["engine"]) for r in lineage.ledger_rows() if r["tag"] == built.tag]
            assert kinds == [("build", ""), ("push", ""), ("pull", with_registry.b)]
    finally:
        docker_engine.images.remove(built.tag)


def test_an_image_under_another_content_key_is_never_taken(
    with_registry, docker_engine, base_images, monkeypatch
):
    """A stray push: the registry holds, under one content tag, an image that carries another key. B refuses it
    (nothing is left on B) and the run builds the image itself."""
    remote = with_registry.remote
    key = hashlib.sha256(f"stray {os.environ['PBENCH_OWNER']}".encode()).hexdigest()
    other = hashlib.sha256(key.encode()).hexdigest()
    built = _probe(docker_engine, key, remote, base_images["base"].tag)
    stray = f"{PROBE_REPO}:{other[:16]}"
    try:
        docker_engine.api.tag(built.id, PROBE_REPO, other[:16])
        registry.push(docker_engine, remote, stray)
        with on_engine(monkeypatch, with_registry.b) as b:
            assert registry.pull(b, remote, stray, other) is None
            assert registry.local_id(b, stray) is None
    finally:
        for tag in (built.tag, stray):
            with contextlib.suppress(Exception):
                docker_engine.images.remove(tag)


def test_the_verdict_of_an_instance_is_the_same_on_both_engines(
    with_registry, curated_demo, docker_engine, monkeypatch, tmp_path
):
    """The demo's bugfix instance, gold patch, scored on A, its images pushed (`pbench images push`), then on B:
    B pulls the root filesystem, base, Postgres and environment images and builds nothing; the verdicts are
    the same, image id and every test's outcome included. Before B pulls anything, A's cached verdict is
    found from B: its key is computed from the registry's digests (the image content), not from B's images."""
    remote = with_registry.remote
    task = Task(BUGFIX)
    gold = task.instance["patch"]
    on_a = task.score(gold, tmp_path / "a")
    assert on_a.resolved and not on_a.cached
    env_tags = [
        t for t in docker_engine.images.get(on_a.image_id).tags if t.startswith(images.ENV_REPO_PREFIX)
    ]
    harness = _harness_tags()
    rows = registry.publish(docker_engine, remote, [*harness, *env_tags])
    assert {r["state"] for r in rows} <= {"pushed", "present"}

    with on_engine(monkeypatch, with_registry.b) as b:
        shared = evaluation.VerdictCache(
            tmp_path / "a" / "cache"
        )  # A's verdicts, as a shared folder holds them
        hit = evaluation.cached_verdict(
            task.instance, task.prediction(gold), task.source, task.repo, tmp_path / "b-lookup", cache=shared
        )
        assert hit is not None and hit.cached and hit.image_id == on_a.image_id
        assert all(registry.local_id(b, tag) is None for tag in env_tags)

        with Events(b) as seen:
            on_b = task.score(gold, tmp_path / "b")
    assert seen.builds() == [], seen.created
    assert {f"{remote.address}/{t}" for t in [*harness, *env_tags]} <= set(seen.pulled)
    same = ("resolved", "status", "f2p_passed", "f2p_total", "p2p_passed", "p2p_total", "image_id")
    assert {f: getattr(on_b, f) for f in same} == {f: getattr(on_a, f) for f in same}
    outcomes = lambda v: sorted((t.side, t.test_id, t.expected, t.outcome, t.passed) for t in v.tests)  # noqa: E731
    assert outcomes(on_b) == outcomes(on_a)
    assert on_b.executed_by.endswith(f"@{with_registry.b}") and "@" not in on_a.executed_by


def test_a_dask_cluster_of_two_engines_evaluates_the_demo(
    with_registry, curated_demo, docker_engine, monkeypatch, tmp_path
):
    """One Dask worker per engine (DOCKER_HOST per worker), one registry, one output folder: the demo's backend
    instances are scored on both engines, gold resolves all of them, and no image is built twice in the cluster:
    every image engine B needs that A has is pulled, never built."""
    from flows.evaluation import run_evaluation

    remote = with_registry.remote
    demo_env = [
        t for i in docker_engine.images.list(name=f"{images.ENV_REPO_PREFIX}-demo-backend") for t in i.tags
    ]
    registry.publish(docker_engine, remote, [*_harness_tags(), *demo_env])
    # The workers' cache folder (one host, so one folder): fresh verdicts, and the ledger of this run only.
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    with engines_kit.dask_cluster(tmp_path / "dask", {"a": "", "b": with_registry.b}) as address:
        report = run_evaluation(
            dask_address=address,
            dataset="demo",
            predictions="gold",
            model="two-engines",
            model_cutoff="2025-06-01",
            run_id="two-engines",
            domains=["backend_only"],
        )
    ledger = lineage.ledger_rows()
    assert report["resolved"] == report["total"] >= 2
    df = pd.read_parquet(Path(report["out_dir"]) / "results.parquet")
    assert not df["cached"].any()
    engines = {w.partition("@")[2] for w in df["executed_by"]}
    assert engines == {"", with_registry.b}, df["executed_by"].tolist()
    builds = [(r["tag"], r["engine"]) for r in ledger if r["kind"] == "build"]
    assert len({t for t, _ in builds}) == len(builds)  # no image built twice in the cluster
    assert not [t for t, e in builds if e == with_registry.b and t in demo_env]  # B pulled what A had
