"""Issue 39, the CLI of an evaluator used to SWE-bench: its flag names where they mean the same (item 2),
messages that name the flag (item 4), exit codes as documented, `pbench report` over a glob (item 5), and a
progress bar that knows its total with log lines above it (item 6)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cli.pbench as entry
from cli import app as app_module
from cli import evaluate as evaluate_cmd

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def _pbench(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        timeout=120,
    )


def _main(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["pbench", *args])
    with pytest.raises(SystemExit) as done:
        entry.main()
    out, err = capsys.readouterr()
    return done.value.code, out, err


@pytest.fixture
def evaluate_calls(monkeypatch, tmp_path):
    """`pbench evaluate`'s arguments as the command hands them on (no corpus, no run)."""
    calls = []
    (tmp_path / "report.txt").write_text("the table\n")

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return {"out_dir": str(tmp_path)}

    monkeypatch.setattr(evaluate_cmd, "_evaluate", record)
    return calls


def test_swebench_flag_names_reach_the_same_options(monkeypatch, capsys, evaluate_calls):
    """Rule (item 2): SWE-bench's names (`run_evaluation`'s and `swebench eval`'s) are aliases of ours where
    they mean the same; its `-i A B` lists ids as nargs="+" does, and mixes with repeated options."""
    ours = ["--predictions", "p.jsonl", "--dataset", "d.jsonl", "--run-id", "r1", "--max-workers", "3"]
    ours += ["--id", "a", "--id", "b", "--id", "c", "--id", "d"]
    theirs = ["--predictions_path", "p.jsonl", "--dataset_name", "d.jsonl", "-id", "r1", "--max_workers", "3"]
    theirs += ["--instance_ids", "a", "b", "-i", "c", "--instance", "d"]
    short = ["-p", "p.jsonl", "-d", "d.jsonl", "--run_id", "r1", "-j", "3", "-i", "a", "b", "c", "d"]
    for args in (ours, theirs, short):
        code, out, err = _main(
            monkeypatch, capsys, "evaluate", *args, "--model", "m", "--model-cutoff", "2025-06-01"
        )
        assert code == 0 and out == "the table\n\n", err
    first, *rest = [call[0] for call in evaluate_calls]
    assert first[:6] == ("d.jsonl", "p.jsonl", "m", "2025-06-01", "r1", 3) and first[6] == [
        "a",
        "b",
        "c",
        "d",
    ]
    assert rest == [first, first]


def test_spread_gives_each_bare_word_after_a_list_option_that_option():
    names = ("--id", "-i")
    assert app_module.spread(["-i", "a", "b", "--model", "m", "x"], names) == [
        "-i",
        "a",
        "-i",
        "b",
        "--model",
        "m",
        "x",
    ]
    assert app_module.spread(["--id=a", "b", "--json"], names) == ["--id=a", "--id", "b", "--json"]
    assert app_module.spread(["-i", "a", "--", "-i", "b"], names) == ["-i", "a", "--", "-i", "b"]
    assert app_module.spread(["--model", "m", "--id", "a"], names) == ["--model", "m", "--id", "a"]


def test_a_refused_value_is_named_by_its_flag(monkeypatch, capsys):
    """Rule (item 4): `--max-workers 0` and a missing `--model-cutoff` name the flag as the docs spell it, on
    one line, exit 2 (was: "Input should be greater than or equal to 1", "Missing parameter: model_cutoff")."""
    base = ["evaluate", "-p", "gold", "--model", "m"]
    code, _, err = _main(monkeypatch, capsys, *base, "--model-cutoff", "2025-06-01", "--max-workers", "0")
    assert code == 2 and err.strip() == "error: --max-workers: Input should be greater than or equal to 1"
    code, _, err = _main(monkeypatch, capsys, *base)
    assert code == 2
    assert (
        err.strip() == "error: --model-cutoff is required (the model's disclosed training cutoff, YYYY-MM-DD)"
    )
    code, _, err = _main(monkeypatch, capsys, "score")
    assert code == 2 and err.strip() == "error: INSTANCE_ID is required"


def test_an_unknown_id_is_named_by_the_flag_that_exists(tmp_path):
    """Rule (item 4): the flag is `--id` (the message said `--ids`); the ids are named, exit 2."""
    folder = tmp_path / "seasons" / "pub"
    folder.mkdir(parents=True)
    folder.joinpath("instances.jsonl").write_text(FIXTURE.read_text())
    res = _pbench("evaluate", "-d", "pub", "-p", "gold", "--model", "m", "--model-cutoff", "2025-06-01",
                  "-i", "nope__a-1", "nope__b-2", env={"PBENCH_OUTPUT_DIR": str(tmp_path)})  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "error: --id nope__a-1 nope__b-2: not in the corpus (of 1 instances)" in res.stderr


def test_help_version_and_a_closed_pipe(tmp_path):
    """Rule (item 4): `-h` is `--help` (the app and each command), `--version` prints the versions, and a
    reader that stops early (`pbench list | head -1`) is exit 0, nothing on stderr: 1 means "not resolved"."""
    for args in (["-h"], ["evaluate", "-h"], ["images", "list", "-h"]):
        res = _pbench(*args)
        assert res.returncode == 0 and "Usage:" in res.stdout, (args, res.stderr)
    res = _pbench("--version")
    assert res.returncode == 0 and res.stdout.startswith("pbench ") and "harness " in res.stdout
    assert "report schema 1" in res.stdout
    validate_help = " ".join(_pbench("validate", "--help").stdout.replace("│", " ").split())
    assert "Exit 0 when both hold, 1 when an instance breaks either" in validate_help
    assert "2 when the harness could not run" in validate_help
    folder = tmp_path / "seasons" / "many"
    folder.mkdir(parents=True)
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    folder.joinpath("instances.jsonl").write_text(
        "".join(json.dumps({**record, "instance_id": f"{record['instance_id']}-{n}"}) + "\n" for n in range(3000))
    )  # fmt: skip
    env = {**os.environ, "PBENCH_OUTPUT_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.pbench", "list", "--dataset", "many"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
    )  # fmt: skip
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away with 2999 lines still to come
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and first.startswith(record["instance_id"].encode()), err
    assert err == b""


def test_report_over_a_glob_skips_and_names_what_is_not_a_finished_run(tmp_path):
    """Rule (item 5): `pbench report data/runs/*/` reads the finished runs and names each other folder on
    stderr (here the old `pbench score` folder and a run in progress); exit 0 for the runs that are runs, 2
    when none is, and 2 for a path that does not exist. `pbench score` writes beside data/runs/, not in it."""
    from tasks_lib.core import paths
    from tasks_lib.judge import run_state

    runs_dir = tmp_path / "runs"
    done = runs_dir / "r1"
    done.mkdir(parents=True)
    (done / "report.json").write_text(json.dumps({"run_id": "r1", "score": 0.5}))
    (runs_dir / "score" / "x-123").mkdir(parents=True)
    (runs_dir / "busy").mkdir()
    (runs_dir / "busy" / "run.json").write_text("{}")
    (runs_dir / "busy" / run_state.JOBS_FILE).write_text("{}\n")
    folders = sorted(str(p) + "/" for p in runs_dir.iterdir())
    res = _pbench("report", *folders, "--json", env={"PBENCH_OUTPUT_DIR": str(tmp_path)})
    assert res.returncode == 0 and json.loads(res.stdout) == [{"run_id": "r1", "score": 0.5}], res.stderr
    lines = res.stderr.splitlines()
    assert f"skipped {runs_dir / 'score'}: not a run folder (no run.json, no report.json)" in lines
    assert any(
        line.startswith(f"skipped {runs_dir / 'busy'}: in progress or interrupted: 0 of 1") for line in lines
    )
    res = _pbench("report", str(runs_dir / "score"), str(runs_dir / "busy"))
    assert res.returncode == 2 and "error: no finished run among the 2 folder(s) given" in res.stderr
    res = _pbench("report", str(done), str(runs_dir / "typo"))
    assert res.returncode == 2 and f"no such folder: {runs_dir / 'typo'}" in res.stderr
    assert paths.scores_dir().parent == paths.runs_dir().parent != paths.scores_dir()


def test_the_bar_knows_its_total_before_the_first_verdict_and_logs_print_above_it(monkeypatch):
    """Rule (item 6): the bar shows 0/N from the start (was 0/? until the first verdict), and a log line (a
    handler writing to the terminal, as Prefect's console handler does) is printed on its own line above the
    bar, not glued to it; the handler writes to its own stream again afterwards."""
    import re

    from rich.console import Console

    buf = io.StringIO()
    out = Console(file=buf, force_terminal=True, width=120)
    logger = logging.getLogger("pbench.test.bar")
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("LOG %(message)s"))
    logger.addHandler(handler)
    try:
        with evaluate_cmd._verdict_progress("model-x", 7, out=out) as on_verdict:
            assert handler.stream is not buf  # written through the bar's console while it shows
            logger.warning("first instance started")
            on_verdict(None, {"resolved": 1, "failed": 0, "errored": 0}, 7)
        assert handler.stream is buf
    finally:
        logger.removeHandler(handler)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    pieces = [p.strip() for p in re.split(r"[\r\n]", screen) if p.strip()]
    assert "LOG first instance started" in pieces, pieces
    assert any("model-x" in p and "0/7" in p for p in pieces) and not any("0/?" in p for p in pieces)
    assert any("1/7" in p and "resolved 1" in p for p in pieces)


def test_the_curation_bar_shows_each_sources_plan_before_its_first_pr(monkeypatch):
    """Rule (item 6): the flow announces each source's planned extractions (no result yet): its bar is 0/N
    from then on, not absent until the first PR."""
    from rich.console import Console

    import cli.corpus as corpus_cmd

    buf = io.StringIO()
    monkeypatch.setattr(corpus_cmd, "console", Console(file=buf, force_terminal=True, width=200))
    with corpus_cmd._curation_progress("demo") as on_pr:
        on_pr("demo", None, {}, 6)
    assert "demo/demo" in buf.getvalue() and "0/6" in buf.getvalue() and "0/?" not in buf.getvalue()
