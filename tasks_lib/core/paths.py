"""Where the project keeps things. Resolved at call time (never at import) from PBENCH_HOME."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def data_dir() -> Path:
    """Committed inputs and gitignored outputs live here (ARCHITECTURE.md layout)."""
    return Path(os.environ.get("PBENCH_DATA_DIR", PROJECT_ROOT / "data"))


def output_dir() -> Path:
    """Where seasons and runs are written (gitignored under data/ by default; PBENCH_OUTPUT_DIR moves them,
    e.g. to storage every worker can reach)."""
    return Path(os.environ.get("PBENCH_OUTPUT_DIR", data_dir()))


def cache_dir() -> Path:
    """Clones, generated demo repositories, build logs, verdict cache, Prefect result storage."""
    return Path(os.environ.get("PBENCH_CACHE_DIR", data_dir() / "cache"))


def verdicts_dir() -> Path:
    """The verdict cache (PBENCH_VERDICT_DIR moves it, e.g. to the output store every worker machine shares:
    its keys hold the image id, the image's content digest, the same on every engine that pulled the image)."""
    return Path(os.environ.get("PBENCH_VERDICT_DIR", cache_dir() / "verdicts"))


def locks_dir() -> Path:
    """The file locks of clones and image builds (PBENCH_LOCK_DIR moves them: a folder every machine reaches
    makes an image's build, pull and push one at a time in the whole cluster)."""
    return Path(os.environ.get("PBENCH_LOCK_DIR", cache_dir() / "locks"))


def sources_dir() -> Path:
    return data_dir() / "sources"


def seasons_dir() -> Path:
    return output_dir() / "seasons"


def runs_dir() -> Path:
    return output_dir() / "runs"


def scores_dir() -> Path:
    """`pbench score`'s outputs: one folder per instance and patch, beside runs_dir() (never a run)."""
    return output_dir() / "scores"


def containers_dir() -> Path:
    return PROJECT_ROOT / "containers"
