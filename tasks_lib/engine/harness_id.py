"""What of the harness decides a run besides its commits, patches and images: keys for the caches of both flows.

Light on purpose: `pbench score` computes it for every verdict it looks up.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from tasks_lib.core import constants, paths
from tasks_lib.sources.record import SourceRecord


def harness_key(source: SourceRecord, images_key: str = "") -> str:
    """sha256 of what of the harness decides an extraction besides its commits and locks: the harness and
    extraction versions, the base images' identity and `recipe_key`."""
    h = hashlib.sha256(f"{constants.HARNESS_VERSION}/{constants.EXTRACTION_VERSION}".encode())
    h.update(images_key.encode())
    h.update(recipe_key(source).encode())
    return h.hexdigest()


def recipe_key(source: SourceRecord) -> str:
    """sha256 of the source record (prestart and test commands, environment, services) and of the harness's
    container recipes and runner: part of every verdict's cache key as well (`verdicts.cache_key`), so that
    a changed runner or prestart is never answered by a verdict made before it. Where the record file and
    the mirror lie on this machine are not part of it (the commits name the code)."""
    placeless = dataclasses.replace(
        source, path=Path(source.name), clone=dataclasses.replace(source.clone, mirror=None)
    )
    h = hashlib.sha256(repr(placeless).encode())
    root = paths.containers_dir()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()
