"""The registry of images (issue 41), without Docker: how PBENCH_REGISTRY is read, what the build ledger says per
engine, and where the caches that machines may share live. The registry itself, two engines and the pulls are in
tests/integration/test_registry_two_engines.py."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from tasks_lib.core import docker_client, paths
from tasks_lib.core.config import Settings
from tasks_lib.core.errors import InputError
from tasks_lib.images import lineage, registry
from tasks_lib.judge import evaluation
from tasks_lib.judge.verdicts import VerdictCache


@pytest.mark.parametrize(
    ("value", "address", "scheme"),
    [
        ("127.0.0.1:5741", "127.0.0.1:5741", "http"),  # loopback: Docker's insecure default, plain HTTP
        ("localhost:5000", "localhost:5000", "http"),
        ("[::1]:5000", "[::1]:5000", "http"),
        ("registry.lan:5000", "registry.lan:5000", "https"),  # anything else: TLS, as Docker asks it
        ("10.0.0.5:5000", "10.0.0.5:5000", "https"),
        ("http://10.0.0.5:5000", "10.0.0.5:5000", "http"),  # listed in every engine's insecure-registries
        ("https://127.0.0.1:5443", "127.0.0.1:5443", "https"),
    ],
)
def test_the_registry_setting_names_an_address_and_how_to_reach_it(value, address, scheme):
    """The harness asks the registry over HTTP only where Docker does by default (a loopback address) or where
    the operator says so (`http://`); the address is what prefixes every reference."""
    parsed = registry.Registry.parse(value)
    assert (parsed.address, parsed.scheme) == (address, scheme)


@pytest.mark.parametrize("value", ["ftp://host:1", "host:port", "host:5000/path", "http://"])
def test_a_bad_registry_setting_is_refused_naming_the_variable(value):
    with pytest.raises(InputError, match="PBENCH_REGISTRY"):
        registry.Registry.parse(value)


def test_no_registry_by_default(monkeypatch):
    """Opt-in: without PBENCH_REGISTRY every engine builds its own images, as before."""
    monkeypatch.delenv("PBENCH_REGISTRY", raising=False)
    assert registry.of(Settings.from_env()) is None
    monkeypatch.setenv("PBENCH_REGISTRY", "127.0.0.1:5741")
    assert registry.of(Settings.from_env()) == registry.Registry("127.0.0.1:5741", "http")


def test_a_registry_that_does_not_answer_is_an_infrastructure_error():
    """A closed port: RegistryError (the harness's), which a run logs before building the image itself."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    remote = registry.Registry(f"127.0.0.1:{port}", "http", timeout_s=2)
    with pytest.raises(registry.RegistryError, match="does not answer"):
        remote.manifest("pbench/env-demo-backend:0123456789abcdef")


@pytest.fixture
def two_engines(monkeypatch, tmp_path):
    """One cache folder shared by two engines of this host (a Dask worker per engine), and one image."""
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    image = SimpleNamespace(
        tags=["pbench/env-s-backend:a"],
        labels={lineage.KEY_LABEL: "a" * 64, lineage.SOURCE_LABEL: "s", lineage.SIDE_LABEL: "backend"},
        attrs={"RootFS": {"Layers": ["l1"]}, "Size": 2**20, "Created": "2026-12-01T00:00:00Z"},
    )
    monkeypatch.setattr(
        docker_client, "get", lambda: SimpleNamespace(images=SimpleNamespace(list=lambda all=False: [image]))
    )
    return monkeypatch


def test_the_ledger_tells_each_engine_what_it_built_and_what_it_pulled(two_engines):
    """The same tag built by the default engine and pulled by engine B: each engine's `pbench images usage`
    counts its own row only (build time on A, pull time on B), and the ledger names the engine of every row."""
    labels = {lineage.SOURCE_LABEL: "s"}
    lineage.ledger("pbench/env-s-backend:a", "a" * 64, 46.0, labels)
    lineage.ledger("pbench/env-s-backend:a", "a" * 64, 3.0, labels, kind="push", digest="sha256:m")
    two_engines.setenv("DOCKER_HOST", "unix:///run/pbench-engines/e1/docker.sock")
    lineage.ledger("pbench/env-s-backend:a", "a" * 64, 2.5, labels, kind="pull", digest="sha256:m")

    (b,) = lineage.usage()
    assert (b["build_s"], b["pulled"], b["pull_s"]) == (0.0, 1, 2.5)
    two_engines.delenv("DOCKER_HOST")
    (a,) = lineage.usage()
    assert (a["build_s"], a["pulled"], a["pull_s"]) == (46.0, 0, 0.0)

    rows = lineage.ledger_rows()
    assert [(r["kind"], r["engine"]) for r in rows] == [
        ("build", ""),
        ("push", ""),
        ("pull", "unix:///run/pbench-engines/e1/docker.sock"),
    ]
    assert rows[2]["digest"] == "sha256:m" and rows[2]["host"] == socket.gethostname()


def test_ledger_rows_written_before_engines_were_recorded_are_the_default_engines(two_engines, tmp_path):
    (tmp_path / "build-logs").mkdir()
    old = {
        "tag": "pbench/env-s-backend:a",
        "key": "a" * 64,
        "seconds": 12.0,
        "source": "s",
        "parent": "",
        "at": "",
    }
    (tmp_path / "build-logs" / "builds.jsonl").write_text(json.dumps(old) + "\n")
    assert lineage.ledger_rows(this_engine=True)[0]["kind"] == "build"
    two_engines.setenv("DOCKER_HOST", "unix:///other.sock")
    assert lineage.ledger_rows(this_engine=True) == []


def test_a_verdict_names_the_engine_that_ran_it(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert "@" not in evaluation.executed_by()
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/pbench-engines/e1/docker.sock")
    assert evaluation.executed_by().endswith("@unix:///run/pbench-engines/e1/docker.sock")


def test_the_verdict_cache_and_the_locks_can_move_to_shared_storage(monkeypatch, tmp_path):
    """What several machines may share: verdicts (keyed on image content) and the build locks (one build of an
    image in the whole cluster); by default both stay in the cache folder."""
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PBENCH_VERDICT_DIR", raising=False)
    monkeypatch.delenv("PBENCH_LOCK_DIR", raising=False)
    assert VerdictCache().root == tmp_path / "cache" / "verdicts"
    assert paths.locks_dir() == tmp_path / "cache" / "locks"
    monkeypatch.setenv("PBENCH_VERDICT_DIR", str(tmp_path / "shared" / "verdicts"))
    monkeypatch.setenv("PBENCH_LOCK_DIR", str(tmp_path / "shared" / "locks"))
    assert VerdictCache().root == tmp_path / "shared" / "verdicts"
    from tasks_lib.sources import gitops

    with gitops.file_lock("pbench_env-s-backend_a"):
        assert (tmp_path / "shared" / "locks" / "pbench_env-s-backend_a.lock").exists()


def test_push_without_tags_sends_what_a_new_machine_needs_first(monkeypatch):
    """`pbench images push` with no tag: the root filesystem, then base and Postgres, then the environment
    images; never an image of the harness's that is no image of a run (a test's probe)."""
    found = [
        SimpleNamespace(tags=["pbench/env-s-backend:b", "pbench/env-s-backend:a"]),
        SimpleNamespace(tags=["pbench/postgres:p"]),
        SimpleNamespace(tags=["pbench/registry-probe:x"]),
        SimpleNamespace(tags=["pbench/base:k"]),
        SimpleNamespace(tags=["pbench/rootfs:bookworm"]),
    ]
    client = SimpleNamespace(images=SimpleNamespace(list=lambda filters=None: found))
    monkeypatch.setattr(docker_client, "get", lambda: client)
    assert lineage.harness_tags() == [
        "pbench/rootfs:bookworm",
        "pbench/base:k",
        "pbench/postgres:p",
        "pbench/env-s-backend:a",
        "pbench/env-s-backend:b",
    ]
