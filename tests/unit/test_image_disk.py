"""The disk an environment image adds (`pbench images usage`, tasks_lib/images/lineage.py): each shared run of
leading layers counted once per source and side, whether the images share it as parent and child (a delta
build) or as siblings built FROM one toolchain stage (frontend images); never the harness's own images."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks_lib.core import docker_client
from tasks_lib.images import lineage as image_lineage

MB = 2**20


def _image(layers, size_mb, tag=None, source="s", side="frontend", parent="", created="2026-12-01T00:00:00Z"):
    labels = {}
    if tag and tag.startswith("pbench/env"):
        labels = {
            image_lineage.KEY_LABEL: tag,
            image_lineage.SOURCE_LABEL: source,
            image_lineage.SIDE_LABEL: side,
            image_lineage.PARENT_LABEL: parent,
        }
    attrs = {"RootFS": {"Layers": list(layers)}, "Size": size_mb * MB, "Created": created}
    return SimpleNamespace(tags=[tag] if tag else [], labels=labels, attrs=attrs)


@pytest.fixture
def machine(monkeypatch, tmp_path):
    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path))
    found: list = []

    def list_(all=False):
        return [i for i in found if all or i.tags]

    monkeypatch.setattr(docker_client, "get", lambda: SimpleNamespace(images=SimpleNamespace(list=list_)))
    return found


def _adds(rows):
    return {r["tag"]: r["adds_mb"] for r in rows}


def test_siblings_of_one_toolchain_stage_count_it_once(machine):
    base = ("b1", "b2")
    toolchain = (*base, "apt-chromium", "node")
    machine += [
        _image(base, 400, "pbench/base:x"),
        _image(toolchain, 1600),  # the untagged stage the legacy builder leaves
        _image((*toolchain, "deps-a"), 2000, "pbench/env-s-frontend:a", created="2026-12-01T01:00:00Z"),
        _image((*toolchain, "deps-b"), 1950, "pbench/env-s-frontend:b", created="2026-12-01T02:00:00Z"),
        _image((*toolchain, "deps-c"), 1900, "pbench/env-s-frontend:c", created="2026-12-01T03:00:00Z"),
    ]
    adds = _adds(image_lineage.image_rows())
    # The first pays for the toolchain; the others only for their dependencies.
    assert adds == {
        "pbench/env-s-frontend:a": 1600.0,
        "pbench/env-s-frontend:b": 350.0,
        "pbench/env-s-frontend:c": 300.0,
    }
    (row,) = image_lineage.usage()
    assert row["unique_mb"] == 1600 + 350 + 300  # 1200 of toolchain + 400 + 350 + 300 of dependencies


def test_a_delta_child_adds_its_own_layers_and_another_source_pays_its_own(machine):
    base = ("b1",)
    machine += [
        _image(base, 400, "pbench/base:x"),
        _image(
            (*base, "venv-a"), 1000, "pbench/env-s-backend:a", side="backend", created="2026-12-01T01:00:00Z"
        ),
        _image(
            (*base, "venv-a", "delta"),
            1010,
            "pbench/env-s-backend:d",
            side="backend",
            parent="pbench/env-s-backend:a",
            created="2026-12-01T02:00:00Z",
        ),
        _image((*base, "venv-a"), 1000, "pbench/env-t-backend:a", source="t", side="backend"),
    ]
    adds = _adds(image_lineage.image_rows())
    assert adds == {
        "pbench/env-s-backend:a": 600.0,
        "pbench/env-s-backend:d": 10.0,
        "pbench/env-t-backend:a": 600.0,
    }


def test_without_the_stage_image_a_sibling_counts_more_never_less(machine):
    base = ("b1",)
    machine += [
        _image(base, 400, "pbench/base:x"),
        _image((*base, "tool", "deps-a"), 2000, "pbench/env-s-frontend:a", created="2026-12-01T01:00:00Z"),
        _image((*base, "tool", "deps-b"), 1900, "pbench/env-s-frontend:b", created="2026-12-01T02:00:00Z"),
    ]
    adds = _adds(image_lineage.image_rows())
    assert adds == {"pbench/env-s-frontend:a": 1600.0, "pbench/env-s-frontend:b": 1500.0}


def test_prune_keeps_an_image_a_container_holds(monkeypatch, tmp_path):
    """`pbench images prune` during a season: the image a run's container holds stays (named in the row), the
    other stale environment images go, one a container takes between listing and removal (409) is kept rather
    than ending the prune, and one another prune removed first (404) counts as gone."""
    import docker.errors

    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path))
    images = []
    for name in ("held", "free", "raced", "gone"):
        image = _image((name,), 1000, f"pbench/env-s-backend:{name}", side="backend")
        image.id = f"sha256:{name}"
        images.append(image)
    removed: list[str] = []

    def remove(tag, noprune=False):
        if tag.endswith(":raced"):
            raise docker.errors.APIError(
                "conflict", response=SimpleNamespace(status_code=409), explanation="in use"
            )
        if tag.endswith(":gone"):
            raise docker.errors.ImageNotFound("no such image", response=SimpleNamespace(status_code=404))
        removed.append(tag)

    client = SimpleNamespace(
        images=SimpleNamespace(list=lambda filters=None: images, remove=remove),
        containers=SimpleNamespace(
            list=lambda all=False: [SimpleNamespace(name="pbench-abc-tests", attrs={"Image": "sha256:held"})]
        ),
    )
    monkeypatch.setattr(docker_client, "get", lambda: client)
    rows = {r["tags"][0].split(":")[1]: r for r in image_lineage.prune_env_images(older_than_days=0)}
    assert removed == ["pbench/env-s-backend:free"]
    assert rows["free"]["removed"] and not rows["free"]["kept"]
    assert not rows["held"]["removed"] and "pbench-abc-tests" in rows["held"]["kept"]
    assert not rows["raced"]["removed"] and "in use" in rows["raced"]["kept"]
    assert rows["gone"]["removed"] and not rows["gone"]["kept"]
    # A dry run lists the same images, and removes none.
    removed.clear()
    dry = image_lineage.prune_env_images(older_than_days=0, dry_run=True)
    assert not removed and len(dry) == 4 and not any(r["removed"] for r in dry)
