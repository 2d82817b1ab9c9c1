"""`pbench report --chart/--html` on real runs of the demo: PNG charts and a static leaderboard page, opened in
headless Chromium (Debian's, from the demo's frontend image, without network) which renders it and takes the
screenshot docs/analysis.md shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tasks_lib.core import docker_client
from tasks_lib.images import build as images
from tasks_lib.sources import repos
from tasks_lib.sources.record import load_source

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _frontend_image() -> str:
    source = load_source("demo")
    repo = repos.repo_dir(source)
    contents = images.dependency_contents(source, repo, "HEAD", side="frontend")
    return images.ensure_env_image(images.frontend_env_spec(source, contents)).tag


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args], capture_output=True, text=True, timeout=600
    )


def test_the_leaderboard_page_renders_in_headless_chromium(curated_demo, tmp_path):
    from flows.evaluation import run_evaluation

    runs = [
        run_evaluation(dataset="demo", predictions=p, model=p, model_cutoff="2025-06-01", run_id=f"page-{p}")
        for p in ("gold", "empty")
    ]
    page = tmp_path / "page"
    res = _run("report", *[r["out_dir"] for r in runs], "--chart", str(page), "--html", str(page))
    assert res.returncode == 0, res.stderr
    for name in ("rates.png", "grid.png", "index.html"):
        assert (page / name).stat().st_size > 1000, name
    assert (page / "rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shot = tmp_path / "shot"
    shot.mkdir(mode=0o777)
    os.chmod(shot, 0o777)
    client = docker_client.get()
    chromium = [
        "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1500",
    ]  # fmt: skip
    mounts = {str(page): {"bind": "/page", "mode": "ro"}, str(shot): {"bind": "/shot", "mode": "rw"}}
    dom = client.containers.run(
        _frontend_image(),
        [*chromium, "--dump-dom", "file:///page/index.html"],
        volumes=mounts,
        network_disabled=True,
        remove=True,
        stderr=False,
    ).decode()
    assert '<table id="leaderboard">' in dom and ">gold<" in dom and ">empty<" in dom
    assert "6/6 (100%)" in dom and "0/6 (0%)" in dom
    client.containers.run(
        _frontend_image(),
        [*chromium, "--screenshot=/shot/leaderboard.png", "file:///page/index.html"],
        volumes=mounts,
        network_disabled=True,
        remove=True,
    )
    png = shot / "leaderboard.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    keep = os.environ.get("PBENCH_KEEP_SCREENSHOT")  # docs/img/ is refreshed from here by hand
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for name in ("rates.png", "grid.png"):
            (Path(keep) / name).write_bytes((page / name).read_bytes())
        (Path(keep) / "leaderboard.png").write_bytes(png.read_bytes())
