"""The CLI's contract: exit codes, and the agent packet never leaking hidden fields."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "instance-1396.jsonl"
IID = "fastapi__full-stack-fastapi-template-1396"


def _pbench(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "cli.pbench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def _season(tmp_path: Path) -> dict:
    folder = tmp_path / "seasons" / "pub"
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE, folder / "instances.jsonl")
    return {"PBENCH_OUTPUT_DIR": str(tmp_path)}


def test_show_never_leaks_tests_patch_or_hints(tmp_path):
    """`pbench show --json` is the agent packet: no test patch, no reference patch, no F2P/P2P, no hints."""
    res = _pbench("show", IID, "--dataset", "pub", "--json", env=_season(tmp_path))
    assert res.returncode == 0, res.stderr
    packet = json.loads(res.stdout)
    assert set(packet) == {
        "instance_id",
        "repo",
        "base_commit",
        "problem_statement",
        "stack_domain",
        "environment",
        "created_at",
    }
    instance = json.loads(FIXTURE.read_text())
    for hidden in ("patch", "test_patch", "fail_to_pass", "pass_to_pass", "hints_text"):
        assert hidden not in packet
    assert "test_get_non_existing_user_as_superuser" not in res.stdout
    assert instance["patch"] not in res.stdout


def test_unknown_instance_and_bad_inputs_exit_2(tmp_path):
    """Bad input is exit 2 with a message naming the input, never a traceback, never 0."""
    env = _season(tmp_path)
    res = _pbench("show", "nope__nope-1", "--dataset", "pub", env=env)
    assert res.returncode == 2 and "nope__nope-1" in res.stderr and "Traceback" not in res.stderr
    res = _pbench("list", "--dataset", str(tmp_path / "missing.jsonl"), env=env)
    assert res.returncode == 2 and "missing.jsonl" in res.stderr
    res = _pbench("curate", "--season", "no-such-season", env=env)
    assert res.returncode == 2 and "no-such-season" in res.stderr


def test_publish_needs_a_token_and_never_internal_only(tmp_path):
    """Publishing to the Hub is optional and needs HF_TOKEN; internal-only tasks are never published."""
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(_season(tmp_path))
    res = subprocess.run(
        [sys.executable, "-m", "cli.pbench", "publish", "--season", "pub", "--repo-id", "o/d"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 2 and "HF_TOKEN" in res.stderr
    res = _pbench(
        "publish",
        "--season",
        "pub",
        "--repo-id",
        "o/d",
        "--tier",
        "internal_only",
        env={**_season(tmp_path), "HF_TOKEN": "hf_dummy"},
    )
    assert res.returncode == 2 and "never published" in res.stderr


def _one_line_with(stderr: str, *needles: str) -> str | None:
    return next((line for line in stderr.splitlines() if all(n in line for n in needles)), None)


def test_errors_are_never_wrapped_whatever_the_path_length(tmp_path):
    """Scripts and operators grep one-line errors and copy paths out of them: with stderr a pipe (not a
    terminal), a 200-character path and the reason stay on one line, however long the line gets."""
    env = _season(tmp_path)
    deep = tmp_path / ("d" * 120) / ("e" * 60)
    patch = str(deep / "nope.diff")
    assert len(patch) > 200
    res = _pbench("score", IID, "--dataset", "pub", "--patch", patch, env=env)
    assert res.returncode == 2, res.stderr
    assert _one_line_with(res.stderr, patch, "no such file"), res.stderr
    missing = str(deep / "missing.jsonl")
    res = _pbench("list", "--dataset", missing, env=env)
    assert res.returncode == 2 and _one_line_with(res.stderr, missing), res.stderr


def test_a_usage_error_is_exit_2_without_a_traceback():
    res = _pbench("no-such-command")
    assert res.returncode == 2 and "No such command" in res.stderr and "Traceback" not in res.stderr


def test_an_unexpected_error_is_exit_2_on_one_line_and_the_traceback_only_with_debug(monkeypatch, capsys):
    """Rule: exit 1 means "not resolved"; a crash inside any command is the harness's (2), one line."""
    import pytest

    import cli.pbench as entry

    def boom(**_):
        raise RuntimeError("state went\nsideways")

    monkeypatch.setattr(entry, "app", boom)
    monkeypatch.setattr(sys, "argv", ["pbench", "score", "x"])
    with pytest.raises(SystemExit) as done:
        entry.main()
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "unexpected RuntimeError: state went sideways" in err and "--debug" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(sys, "argv", ["pbench", "--debug", "score", "x"])
    with pytest.raises(RuntimeError):
        entry.main()


def test_curate_choices_are_refused_before_prefect_starts(tmp_path):
    """A typo in --until / --crawl / --limit / --refresh: exit 2 naming the option, and no Prefect server was
    started."""
    for args, option in (
        (["--until", "filtr"], "--until"),
        (["--crawl", "gitlab"], "--crawl"),
        (["--limit", "0"], "--limit"),
        (["--max-concurrency", "0"], "--max-concurrency"),
        (["--refresh", "0"], "--refresh"),
        (["--refresh", "5", "--until", "filter"], "--refresh"),
    ):
        res = _pbench("curate", "--season", "demo", *args, env={"PBENCH_OUTPUT_DIR": str(tmp_path)})
        assert res.returncode == 2 and option in res.stderr, res.stderr
        assert "Starting temporary server" not in res.stderr and "Traceback" not in res.stderr


def test_hints_reach_the_packet_only_when_asked_for(tmp_path):
    env = _season(tmp_path)
    res = _pbench("show", IID, "--dataset", "pub", "--json", "--with-hints", env=env)
    assert res.returncode == 0, res.stderr
    packet = json.loads(res.stdout)
    assert packet["hints_text"] == json.loads(FIXTURE.read_text()).get("hints_text", "")
    assert "patch" not in packet and "fail_to_pass" not in packet


def test_list_and_report_print_json_when_asked(tmp_path):
    """`--json`: one object per instance (`list`), each run's report.json (`report`): parseable, complete."""
    env = _season(tmp_path)
    res = _pbench("list", "--dataset", "pub", "--json", env=env)
    assert res.returncode == 0, res.stderr
    (row,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert (
        row["instance_id"] == IID and row["fail_to_pass"]["backend"] and row["stack_domain"] == "backend_only"
    )
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "report.json").write_text(json.dumps({"run_id": "r1", "score": 0.5}))
    res = _pbench("report", str(run), "--json", env=env)
    assert res.returncode == 0 and json.loads(res.stdout) == [{"run_id": "r1", "score": 0.5}], res.stderr
    res = _pbench("report", str(tmp_path), "--json", env=env)
    assert res.returncode == 2 and "not a run folder" in res.stderr


def test_curate_shows_a_live_bar_per_source_on_a_terminal_only(monkeypatch):
    """On a terminal: PRs done of planned, the last PR with both sides' counts, counts per status. In a log:
    nothing but the flow's own line (no bar rendered into a file)."""
    import io

    from rich.console import Console

    import cli.corpus as corpus_cmd
    from tasks_lib.core.constants import ExtractionStatus
    from tasks_lib.curation.extraction import ExtractionResult

    result = ExtractionResult(14, ExtractionStatus.OK, "a", "b", frontend_fail_to_pass=["x.spec.ts:1:1 › t"])
    buf = io.StringIO()
    monkeypatch.setattr(corpus_cmd, "console", Console(file=buf, force_terminal=True, width=200))
    with corpus_cmd._curation_progress("demo") as on_pr:
        on_pr("demo", result, {"ok": 1}, 6)
    shown = buf.getvalue()
    assert "demo/demo" in shown and "1/6" in shown and "#14 ok F2P 1 P2P 0" in shown and "ok 1" in shown
    plain = io.StringIO()
    monkeypatch.setattr(corpus_cmd, "console", Console(file=plain, force_terminal=False))
    with corpus_cmd._curation_progress("demo") as on_pr:
        on_pr("demo", result, {"ok": 1}, 6)
    assert plain.getvalue() == ""


def test_validate_takes_evaluates_selection_and_refuses_an_unknown_one_before_prefect(tmp_path):
    """`pbench validate` selects like `evaluate` (--id, --domain, --tier) and by repository (--repo): one
    source of a corpus of several can be self-tested alone. An id or a repository the corpus does not hold is
    exit 2 naming it, before a server starts."""
    env = _season(tmp_path)
    for args, needle in (
        (["--repo", "acme/none"], "acme/none"),
        (["--id", "nope__nope-1"], "nope__nope-1"),
    ):
        res = _pbench("validate", "--dataset", "pub", *args, env=env)
        assert res.returncode == 2 and needle in res.stderr, res.stderr
        assert "Starting temporary server" not in res.stderr and "Traceback" not in res.stderr
    assert (
        "fastapi/full-stack-fastapi-template"
        in _pbench("validate", "--dataset", "pub", "--repo", "acme/none", env=env).stderr
    )  # the message lists the corpus's repositories


def test_curate_checks_every_input_before_prefect_starts(tmp_path):
    """Rule (issue 39, item 3): a mirror that is not there or is no git repository, and an export file with a
    malformed row, are one line naming the input and exit 2, before any Prefect server starts (the demo
    season clones from a generator, so --mirror is the only way in for a bad path)."""
    env = {"PBENCH_OUTPUT_DIR": str(tmp_path / "out"), "PREFECT_LOGGING_LEVEL": "INFO"}
    res = _pbench("curate", "--season", "demo", "--mirror", str(tmp_path / "nope"), env=env)
    assert res.returncode == 2 and f"--mirror {tmp_path / 'nope'}: no such repository" in res.stderr
    (tmp_path / "plain").mkdir()
    res = _pbench("curate", "--season", "demo", "--mirror", str(tmp_path / "plain"), env=env)
    assert res.returncode == 2 and "not a git repository" in res.stderr
    export = tmp_path / "prs.jsonl"
    export.write_text('{"number": 1, "title": "x"}\n')
    res = _pbench("curate", "--season", "demo", "--prs-file", str(export), "--until", "crawl", env=env)
    assert res.returncode == 2 and f"{export}: line 1: field" in res.stderr
    for r in (res,):
        assert "Traceback" not in r.stderr and "Starting temporary server" not in r.stderr + r.stdout


def test_export_refuses_an_out_suffix_it_cannot_write(tmp_path):
    """Rule (issue 39, item 3): `--out x.csv` was written as a `datasets` folder named x.csv; now exit 2 naming it."""
    res = _pbench("export", "--dataset", "pub", "--out", str(tmp_path / "x.csv"), env=_season(tmp_path))
    assert res.returncode == 2 and "x.csv" in res.stderr and "'.csv'" in res.stderr
    assert not (tmp_path / "x.csv").exists()
    res = _pbench("export", "--dataset", "pub", "--out", str(tmp_path / "flat-v0.3"), env=_season(tmp_path))
    assert res.returncode == 0 and (tmp_path / "flat-v0.3" / "dataset_dict.json").is_file(), res.stderr


def test_demo_gives_curate_and_validate_every_option_a_value(monkeypatch):
    """`pbench demo` calls the `curate` and `validate` commands as Python functions, where an option left out
    is typer's OptionInfo object, not its default (a new `--refresh` once broke the demo that way): every
    parameter of both gets a plain value."""
    import inspect

    import typer

    from cli import evaluate

    calls = {}
    real = {"curate": evaluate.curate, "validate": evaluate.validate}
    for name in real:
        monkeypatch.setattr(evaluate, name, lambda _n=name, **kw: calls.__setitem__(_n, kw))
    evaluate.demo(max_workers=1)
    for name, fn in real.items():
        assert set(calls[name]) == set(inspect.signature(fn).parameters), name
        assert not any(isinstance(v, typer.models.OptionInfo) for v in calls[name].values()), name
