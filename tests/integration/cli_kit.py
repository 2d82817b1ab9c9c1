"""A `pbench` command in a fresh process, for tests of what a command does before (or without) Prefect."""

from __future__ import annotations

import os
from pathlib import Path


def pbench_without_prefect(*args: str):
    """`pbench ARGS` in a fresh process with the Prefect API pointed at a closed port: any use of Prefect fails."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"},
        capture_output=True,
        text=True,
        timeout=300,
    )
