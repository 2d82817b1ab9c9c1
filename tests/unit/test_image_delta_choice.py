"""Which environment image a new lock builds on (tasks_lib/images/build.py `_delta_parent`): the same source and
recipe, the fewest differing packages, never one too deep, never one that shares less than half."""

from __future__ import annotations

from types import SimpleNamespace

from tasks_lib.images import build as images


class FakeImages:
    def __init__(self, rows):
        self.rows = rows

    def list(self, filters):
        (wanted,) = filters["label"]
        key, value = wanted.split("=", 1)
        return [r for r in self.rows if r.labels.get(key) == value]


def _image(tag, packages, *, source="s", recipe="r", depth=0):
    labels = {
        images.SOURCE_LABEL: source,
        images.RECIPE_LABEL: recipe,
        images.PACKAGES_LABEL: " ".join(packages),
        images.DEPTH_LABEL: str(depth),
    }
    return SimpleNamespace(tags=[tag], labels=labels)


SPEC = SimpleNamespace(source="s")
NEW = {f"p{i}==1" for i in range(10)}


def _choose(rows):
    return images.delta_parent(SimpleNamespace(images=FakeImages(rows)), SPEC, "r", NEW)


def test_the_nearest_image_of_the_same_source_and_recipe_is_the_parent():
    near = _image("near", sorted(NEW - {"p0==1"}))
    far = _image("far", sorted(NEW - {"p0==1", "p1==1", "p2==1"}))
    other_source = _image("theirs", sorted(NEW), source="t")
    other_recipe = _image("recipe", sorted(NEW), recipe="q")
    args, labels = _choose([far, near, other_source, other_recipe])
    assert args == {"BASE": "near"}
    assert labels == {images.PARENT_LABEL: "near", images.DEPTH_LABEL: "1"}


def test_too_deep_or_too_different_builds_from_scratch():
    deep = _image("deep", sorted(NEW), depth=images.MAX_DELTA_DEPTH)
    different = _image("different", ["x==1", "y==1"])
    assert _choose([deep, different]) == ({}, {images.DEPTH_LABEL: "0"})
    assert _choose([]) == ({}, {images.DEPTH_LABEL: "0"})


def test_lookup_only_refuses_a_build_and_a_probe_container_and_ends_with_its_context(tmp_path, monkeypatch):
    """What `pbench evaluate` asks before deciding whether it needs Prefect: an image that would have to be
    built, or a tooling probe container, is a `NotBuilt` answer there, never work started."""
    import pytest

    from tasks_lib.images import build as images
    from tasks_lib.judge import tooling

    monkeypatch.setenv("PBENCH_CACHE_DIR", str(tmp_path))
    with images.lookup_only():
        with pytest.raises(images.NotBuilt, match="pbench/env-x"):
            images.require_build("pbench/env-x:1234")
        with pytest.raises(images.NotBuilt, match="tooling probe"):
            tooling.of_image("sha256:" + "0" * 64)
    images.require_build("pbench/env-x:1234")  # outside the context: allowed
