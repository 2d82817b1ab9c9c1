"""Contamination tiering (curation stage 7) and season definitions: both are data under `data/`.

held_out when merged after ANY target model's cutoff, public when on/before ALL of them, internal_only by an
explicit list; a season names sources, window and target models and refuses values that would make the
season's labels meaningless (issue 3).
"""

from __future__ import annotations

import shutil
import textwrap
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from tasks_lib.core import paths
from tasks_lib.core.constants import StackDomain, Tier
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import tiering
from tasks_lib.curation import season

CUTOFFS = {"early": date(2025, 1, 1), "late": date(2025, 6, 1)}


@pytest.fixture
def data_dir(tmp_path, monkeypatch) -> Path:
    """A private copy of the committed inputs, pointed to by PBENCH_DATA_DIR (paths resolve at call time)."""
    root = tmp_path / "data"
    (root / "season_defs").mkdir(parents=True)
    shutil.copy(paths.PROJECT_ROOT / "data" / "model_cutoffs.toml", root / "model_cutoffs.toml")
    monkeypatch.setenv("PBENCH_DATA_DIR", str(root))
    return root


GOOD_SEASON = textwrap.dedent(
    """\
    name = "s"
    sources = ["demo"]
    target_models = ["demo-model-2025-06", "demo-model-2025-01"]
    internal_only = ["prototypebench__demo-fullstack-3"]

    [window]
    since = "2025-01-01"
    until = "2025-12-31"

    [distribution]
    target = { backend_only = 0.5, fullstack = 0.5 }
    tolerance = 0.2

    [extraction]
    head_runs = 3
    base_runs = 2
    """
)


def write_season(data_dir: Path, text: str, name: str = "s") -> Path:
    path = data_dir / "season_defs" / f"{name}.toml"
    path.write_text(text)
    return path


def edit(text: str, old: str, new: str) -> str:
    assert old in text, f"test setup: {old!r} not in the base season"
    return text.replace(old, new, 1)


# --------------------------------------------------------------------------- assign_tier


@pytest.mark.parametrize(
    ("merged_at", "tier"),
    [
        ("2024-12-31T23:59:59Z", Tier.PUBLIC),  # before every cutoff
        ("2025-01-01T12:00:00Z", Tier.PUBLIC),  # ON the earliest cutoff day: not after it
        ("2025-01-02T00:00:00Z", Tier.HELD_OUT),  # after ONE cutoff is enough
        ("2025-06-01T00:00:00Z", Tier.HELD_OUT),
        ("2025-06-02T00:00:00Z", Tier.HELD_OUT),  # after all of them
        (date(2024, 6, 1), Tier.PUBLIC),
        (datetime(2025, 3, 1, tzinfo=UTC), Tier.HELD_OUT),
    ],
)
def test_held_out_iff_merged_after_any_target_cutoff(merged_at, tier):
    """Rule: held_out iff merged after ANY target model's cutoff; public iff on or before ALL of them."""
    assert tiering.assign_tier("acme__shop-1", merged_at, CUTOFFS) == tier


def test_single_target_model_boundary():
    """Rule: the cutoff day itself is the last day the model may have seen: on it is public, after is not."""
    one = {"m": date(2025, 6, 1)}
    assert tiering.assign_tier("x-1", "2025-06-01T23:59:59Z", one) == Tier.PUBLIC
    assert tiering.assign_tier("x-1", "2025-06-02T00:00:00Z", one) == Tier.HELD_OUT


@pytest.mark.parametrize("merged_at", ["2020-01-01T00:00:00Z", "2030-01-01T00:00:00Z"])
def test_internal_only_list_wins(merged_at):
    """Rule: an id on the internal_only list is internal_only whatever its merge date."""
    assert tiering.assign_tier("acme__shop-7", merged_at, CUTOFFS, {"acme__shop-7"}) == Tier.INTERNAL_ONLY
    assert tiering.assign_tier("acme__shop-8", merged_at, CUTOFFS, {"acme__shop-7"}) != Tier.INTERNAL_ONLY


def test_no_target_models_is_an_input_error():
    """Rule: tiers are relative to target models; with none, tiering refuses instead of guessing."""
    with pytest.raises(InputError, match="target model"):
        tiering.assign_tier("acme__shop-1", "2025-01-01T00:00:00Z", {})


def test_bad_merge_date_names_the_instance():
    """Rule: an unparseable merge time is an InputError naming the instance, so one bad PR is findable."""
    with pytest.raises(InputError, match="acme__shop-1"):
        tiering.assign_tier("acme__shop-1", "yesterday", CUTOFFS)


def test_held_out_relative_to_one_model():
    """Rule: the evaluation report splits by 'merged after the evaluated model's cutoff' (strictly after)."""
    assert tiering.held_out_relative_to("2025-06-02T00:00:00Z", date(2025, 6, 1))
    assert not tiering.held_out_relative_to("2025-06-01T23:00:00Z", "2025-06-01")
    assert not tiering.held_out_relative_to("2024-01-01T00:00:00Z", "2025-06-01")


# --------------------------------------------------------------------------- model cutoffs


def test_committed_model_cutoffs_load():
    """Rule: model cutoffs are data (`data/model_cutoffs.toml`): model id -> date."""
    cutoffs = tiering.load_cutoffs()
    assert cutoffs["demo-model-2025-06"] == date(2025, 6, 1)
    assert cutoffs["demo-model-2025-01"] == date(2025, 1, 1)
    assert "claude-opus-4-7" in cutoffs
    assert all(type(v) is date for v in cutoffs.values())


def test_model_cutoffs_follow_pbench_data_dir(data_dir):
    """Rule: paths resolve at call time from PBENCH_DATA_DIR, so a private copy can be edited."""
    (data_dir / "model_cutoffs.toml").write_text('[models."m"]\ncutoff = 2024-02-03\n')
    assert tiering.load_cutoffs() == {"m": date(2024, 2, 3)}


def test_bad_model_cutoff_names_the_model(data_dir):
    """Rule: a cutoff that is not a date names the file and `models.<id>.cutoff`."""
    path = data_dir / "model_cutoffs.toml"
    path.write_text('[models."m1"]\ncutoff = "soon"\n')
    with pytest.raises(InputError) as exc:
        tiering.load_cutoffs()
    assert str(path) in str(exc.value)
    assert "models.m1.cutoff" in str(exc.value)


def test_missing_cutoff_names_the_model(tmp_path):
    """Rule: a model entry without a cutoff is refused, naming it."""
    path = tmp_path / "cutoffs.toml"
    path.write_text('[models."m2"]\nnote = "no cutoff"\n')
    with pytest.raises(InputError, match="models.m2.cutoff"):
        tiering.load_cutoffs(path)


def test_unreadable_cutoffs_file_is_an_input_error(tmp_path):
    """Rule: a missing or invalid cutoffs file is an InputError naming the file."""
    with pytest.raises(InputError, match="nope.toml"):
        tiering.load_cutoffs(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[models\n")
    with pytest.raises(InputError, match="bad.toml"):
        tiering.load_cutoffs(bad)


def test_toml_datetime_cutoff_is_reduced_to_a_date(tmp_path):
    """Rule: cutoffs are dates; a TOML datetime value is accepted as its day (or refused with InputError),
    never stored as a datetime that crashes tier assignment."""
    path = tmp_path / "cutoffs.toml"
    path.write_text('[models."m"]\ncutoff = 2025-06-01T00:00:00Z\n')
    try:
        cutoffs = tiering.load_cutoffs(path)
    except InputError as exc:  # refusing it, naming the field, is acceptable too
        assert "models.m.cutoff" in str(exc)
        return
    assert type(cutoffs["m"]) is date
    assert tiering.assign_tier("x-1", "2025-07-01T00:00:00Z", cutoffs) == Tier.HELD_OUT


# --------------------------------------------------------------------------- seasons


def test_committed_demo_season_loads():
    """Rule: the demo season (`data/season_defs/demo.toml`) loads and its target models have cutoffs."""
    s = season.load_season("demo")
    assert s.name == "demo"
    assert s.sources == ("demo",)
    assert s.target_models == ("demo-model-2025-06",)
    assert s.head_runs >= 3 and s.base_runs >= 2
    assert s.since == date(2025, 1, 1) and s.until is None
    assert set(s.target_mix) <= {d.value for d in StackDomain}
    assert s.target_cutoffs() == {"demo-model-2025-06": date(2025, 6, 1)}
    assert s.out_dir == paths.seasons_dir() / "demo"


def test_custom_season_loads_from_pbench_data_dir(data_dir):
    """Rule: a season is data; every field of a valid definition is read as written."""
    path = write_season(data_dir, GOOD_SEASON)
    s = season.load_season("s")
    assert s.path == path
    assert s.target_models == ("demo-model-2025-06", "demo-model-2025-01")
    assert s.internal_only == frozenset({"prototypebench__demo-fullstack-3"})
    assert (s.since, s.until) == (date(2025, 1, 1), date(2025, 12, 31))
    assert s.target_mix == {"backend_only": 0.5, "fullstack": 0.5}
    assert s.tolerance == 0.2
    assert s.target_cutoffs() == {
        "demo-model-2025-06": date(2025, 6, 1),
        "demo-model-2025-01": date(2025, 1, 1),
    }
    assert season.load_season("s", sources=["other"]).sources == ("other",)  # CLI --source wins


def test_season_tiers_follow_its_target_models(data_dir):
    """Rule: a season's tiers use its target models' cutoffs and its internal_only list."""
    write_season(data_dir, GOOD_SEASON)
    s = season.load_season("s")
    cutoffs = s.target_cutoffs()
    assert tiering.assign_tier("a-1", "2025-03-01T00:00:00Z", cutoffs, s.internal_only) == Tier.HELD_OUT
    assert tiering.assign_tier("a-1", "2024-12-01T00:00:00Z", cutoffs, s.internal_only) == Tier.PUBLIC
    internal = "prototypebench__demo-fullstack-3"
    assert (
        tiering.assign_tier(internal, "2024-12-01T00:00:00Z", cutoffs, s.internal_only) == Tier.INTERNAL_ONLY
    )


BAD_SEASONS = [
    ("head-runs-2", ("head_runs = 3", "head_runs = 2"), ["extraction", "head_runs"]),
    ("base-runs-1", ("base_runs = 2", "base_runs = 1"), ["extraction", "base_runs"]),
    ("unknown-domain", ("fullstack = 0.5", "mobile = 0.5"), ["distribution.target", "mobile"]),
    ("missing-sources", ('sources = ["demo"]\n', ""), ["'sources'"]),
    ("empty-sources", ('sources = ["demo"]', "sources = []"), ["'sources'"]),
    (
        "missing-target-models",
        ('target_models = ["demo-model-2025-06", "demo-model-2025-01"]\n', ""),
        ["'target_models'"],
    ),
    ("name-mismatch", ('name = "s"', 'name = "t"'), ["'name'"]),
    ("bad-window", ('since = "2025-01-01"', 'since = "spring"'), ["window.since"]),
    ("invalid-toml", ("[window]", "[window"), ["not valid TOML"]),
]


@pytest.mark.parametrize(
    ("old_new", "needles"), [b[1:] for b in BAD_SEASONS], ids=[b[0] for b in BAD_SEASONS]
)
def test_bad_season_is_an_input_error_naming_the_field(data_dir, old_new, needles):
    """Rule: a bad season (too few runs for flakiness detection, unknown domain, no sources, ...) fails
    with an InputError naming the file and the field."""
    path = write_season(data_dir, edit(GOOD_SEASON, *old_new))
    with pytest.raises(InputError) as exc:
        season.load_season("s")
    message = str(exc.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message


def test_unknown_target_model_is_named(data_dir):
    """Rule: a target model without a known cutoff is named, with where to add it."""
    write_season(data_dir, edit(GOOD_SEASON, '"demo-model-2025-01"', '"mystery-model"'))
    s = season.load_season("s")
    with pytest.raises(InputError) as exc:
        s.target_cutoffs()
    assert "target_models" in str(exc.value) and "mystery-model" in str(exc.value)


def test_unknown_season_lists_the_known_ones(data_dir):
    """Rule: a wrong season name says which seasons exist."""
    write_season(data_dir, GOOD_SEASON)
    with pytest.raises(InputError) as exc:
        season.load_season("nope")
    assert "known: s" in str(exc.value)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('sources = ["demo"]', 'sources = "demo"', "sources"),
        (
            'target_models = ["demo-model-2025-06", "demo-model-2025-01"]',
            'target_models = "demo-model-2025-06"',
            "target_models",
        ),
        (
            'internal_only = ["prototypebench__demo-fullstack-3"]',
            'internal_only = "prototypebench__demo-fullstack-3"',
            "internal_only",
        ),
    ],
    ids=["sources", "target_models", "internal_only"],
)
def test_list_field_given_as_a_string_is_refused(data_dir, old, new, field):
    """Rule: a bad season fails with InputError naming the field; a list field written as a string must not
    silently become a list of characters (internal_only would then protect nothing)."""
    write_season(data_dir, edit(GOOD_SEASON, old, new))
    with pytest.raises(InputError, match=field):
        season.load_season("s")


def test_non_integer_head_runs_is_an_input_error(data_dir):
    """Rule: a bad season fails with InputError (exit 2) naming the field, never a bare ValueError."""
    write_season(data_dir, edit(GOOD_SEASON, "head_runs = 3", 'head_runs = "three"'))
    with pytest.raises(InputError, match="head_runs"):
        season.load_season("s")
