"""The `prefect` command line against a test's Prefect server (the `prefect_server` fixture, conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prefect_cli(args, env, timeout=300):
    env = {**env, "COLUMNS": "250"}  # rich tables: no truncated names
    res = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout
