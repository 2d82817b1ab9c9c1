"""Lock churn without image explosion: the image of a new lock is built on the nearest environment image of the
same source and recipe, installs only the difference, and holds exactly what a build from scratch holds."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tasks_lib.core import docker_client
from tasks_lib.images import build as images
from tasks_lib.images import lineage as image_lineage
from tasks_lib.sources.record import load_source_file

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "uv-delta"


def _source(tmp_path: Path, name: str):
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'name = "{name}"\nrepo = "acme/{name}"\n[clone]\nurl = "https://example.org/x.git"\n'
        '[backend]\ndir = "."\npython_version = "3.11"\ninstaller = "uv"\nlock_files = ["uv.lock"]\n'
        'manifest_files = ["pyproject.toml"]\n[test_files]\npatterns = ["tests/**"]\n'
    )
    return load_source_file(path)


def _contents(which: str) -> dict[str, bytes]:
    return {rel: (FIXTURES / which / rel).read_bytes() for rel in ("uv.lock", "pyproject.toml")}


LIST = "import importlib.metadata as m; print(*sorted(f'{d.name}=={d.version}' for d in m.distributions()))"


def _in_env(tag: str, code: str) -> list[str]:
    """What `code`, run by the image's environment Python, prints, as words."""
    out = docker_client.get().containers.run(tag, ["/opt/venv/bin/python", "-c", code], remove=True)
    return out.decode().split()


def _freeze(tag: str) -> list[str]:
    """The distributions of the image's environment (uv's venv has no pip)."""
    return _in_env(tag, LIST)


UNCOMPILED = (
    "import importlib.util, pathlib, sysconfig\n"
    "site = pathlib.Path(sysconfig.get_paths()['purelib'])\n"
    "print(*sorted(str(p.relative_to(site)) for p in site.rglob('*.py')\n"
    "             if not pathlib.Path(importlib.util.cache_from_source(str(p))).exists()))"
)


def _uncompiled(tag: str) -> list[str]:
    """Modules of the image's environment without bytecode: the tests run with PYTHONDONTWRITEBYTECODE, so each
    of them would be compiled again by every Python process of every run."""
    return _in_env(tag, UNCOMPILED)


def test_a_new_lock_builds_on_the_nearest_image_and_equals_a_build_from_scratch(tmp_path, base_images):
    client = docker_client.get()
    name = f"delta{uuid.uuid4().hex[:8]}"  # a source of its own: no image of an earlier run is near it
    source = _source(tmp_path, name)
    built = []
    try:
        a = images.ensure_env_image(images.backend_env_spec(source, _contents("a")))
        built.append(a.tag)
        assert a.built and client.images.get(a.tag).labels[images.DEPTH_LABEL] == "0"
        b = images.ensure_env_image(images.backend_env_spec(source, _contents("b")))
        built.append(b.tag)
        labels = client.images.get(b.tag).labels
        assert b.built and labels[images.PARENT_LABEL] == a.tag and labels[images.DEPTH_LABEL] == "1"
        delta_b = _freeze(b.tag)
        assert delta_b == ["certifi==2024.8.30", "idna==3.7", "six==1.16.0"]
        # uv installs no bytecode; the image ships it, the delta's new packages included.
        assert _uncompiled(a.tag) == [] and _uncompiled(b.tag) == []
        # The same lock from scratch (another source name, same recipe otherwise): the same packages.
        scratch = images.ensure_env_image(
            images.backend_env_spec(_source(tmp_path, name + "s"), _contents("b"))
        )
        built.append(scratch.tag)
        assert images.PARENT_LABEL not in client.images.get(scratch.tag).labels
        assert _freeze(scratch.tag) == delta_b
        # Back to lock a, built on b: uv's exact sync removes certifi.
        client.images.remove(a.tag, force=True)
        built.remove(a.tag)
        again = images.ensure_env_image(images.backend_env_spec(source, _contents("a")))
        built.append(again.tag)
        assert client.images.get(again.tag).labels[images.PARENT_LABEL] == b.tag
        assert _freeze(again.tag) == ["idna==3.7", "six==1.16.0"]
        # `pbench images usage`: per source, the images, those built on a parent, their build time.
        (row,) = [r for r in images.usage() if r["source"] == name]
        assert row["images"] == 2 and row["delta"] == 2 and row["build_s"] > 0 and row["unique_mb"] >= 0
        # `--images`: each delta image adds to its parent only its own layers, not the parent's.
        rows = {r["tag"]: r for r in image_lineage.image_rows() if r["source"] == name}
        assert set(rows) == {b.tag, again.tag}
        assert rows[b.tag]["parent"] == a.tag and rows[again.tag]["parent"] == b.tag
        for r in rows.values():
            assert 0 <= r["adds_mb"] < r["size_mb"] and r["build_s"] > 0 and r["built_at"]
        assert rows[again.tag]["size_mb"] > rows[b.tag]["size_mb"] - 1  # built on b: b's layers and more
    finally:
        for tag in reversed(built):
            client.images.remove(tag, force=True)
