"""The up-to-date check of a season (tasks_lib.curation.state): what makes a stored state stale."""

from __future__ import annotations

import fcntl

from tasks_lib.curation import state as season_state


def _folder(tmp_path):
    out = tmp_path / "season"
    (out / "hf").mkdir(parents=True)
    (out / "instances.jsonl").write_text('{"instance_id": "a"}\n')
    (out / "hf" / "data.parquet").write_bytes(b"PAR1")
    (out / "logs").mkdir()
    return out


def test_the_stored_summary_answers_only_for_the_same_fingerprint_and_untouched_outputs(tmp_path):
    out = _folder(tmp_path)
    season_state.record(out, "fp-1", {"instances": 1}, ["ok"])
    assert season_state.up_to_date({"demo": out}, "fp-1") == {"demo": {"instances": 1}}
    assert season_state.up_to_date({"demo": out}, "fp-2") is None
    assert season_state.up_to_date({"demo": out}, None) is None
    # Logs and the run ledger are not outputs; a record, a dataset file or a new output file is.
    (out / "logs" / "pr-1.log").write_text("x")
    (out / "season-runs.jsonl").write_text("{}\n")
    assert season_state.up_to_date({"demo": out}, "fp-1") is not None
    (out / "hf" / "data.parquet").write_bytes(b"PAR2")
    assert season_state.up_to_date({"demo": out}, "fp-1") is None


def test_a_run_that_left_an_extraction_to_retry_or_has_no_fingerprint_records_nothing(tmp_path):
    out = _folder(tmp_path)
    season_state.record(out, "fp-1", {"instances": 1}, ["ok"])
    season_state.record(out, "fp-1", {"instances": 1}, ["ok", "infra_error"])
    assert season_state.up_to_date({"demo": out}, "fp-1") is None
    season_state.record(out, None, {"instances": 1}, ["ok"])
    assert not (out / season_state.STATE_FILE).exists()
    season_state.record(out, "fp-1", {"instances": 1}, ["ok"])
    season_state.forget(out)  # a run started
    assert season_state.up_to_date({"demo": out}, "fp-1") is None


def test_a_season_whose_lock_is_held_is_never_up_to_date(tmp_path):
    out = _folder(tmp_path)
    season_state.record(out, "fp-1", {"instances": 1}, ["ok"])
    lock = out / ".season.lock"
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert season_state.up_to_date({"demo": out}, "fp-1", lock) is None
        fcntl.flock(fh, fcntl.LOCK_UN)
    assert season_state.up_to_date({"demo": out}, "fp-1", lock) is not None


def test_the_fingerprint_of_a_github_crawl_is_unknowable_offline():
    assert season_state.fingerprint("template", None, "github", None, None, None) is None
