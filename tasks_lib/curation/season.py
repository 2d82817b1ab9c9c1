"""A curation season: which sources, which window, which target models, and the stage settings."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from tasks_lib.core import paths
from tasks_lib.core.constants import StackDomain
from tasks_lib.core.errors import InputError
from tasks_lib.corpus import tiering
from tasks_lib.engine.grading import COLLECTION_ERRORS, LABEL_RULES

ORDERS = ("oldest", "newest")
# Filter reasons a season may waive for its listed PRs: rules of size and shape, never what makes a PR no
# task (bots, docs, no tests, another branch).
WAIVABLE = ("too_large", "too_small")


@dataclass(frozen=True)
class Season:
    name: str
    sources: tuple[str, ...]
    target_models: tuple[str, ...]
    internal_only: frozenset[str]
    since: date | None
    until: date | None
    target_mix: dict[str, float]
    tolerance: float
    fail_on_mismatch: bool
    head_runs: int = 3
    base_runs: int = 2
    max_concurrency: int = 2
    # Order of PRs of equal priority: "oldest" (lowest number first) or "newest" (highest number first: the PRs
    # after the target models' cutoffs, which evaluation values most, and the code closest to the repository
    # as it is, come first when a season is cut short).
    order: str = "oldest"
    # `extraction.prs`: only these PRs, in this order (a published corpus reproduced, a re-extraction of
    # chosen PRs); a listed PR the filter did not keep is reported with its reasons, never extracted.
    prs: tuple[int, ...] = ()
    # `extraction.labels`: the labelling rule (`grading.LABEL_RULES`); "published-v0.1" only to reproduce the
    # published corpus. `extraction.waive`: filter reasons not held against the PRs of `extraction.prs` (a
    # published curation that had no such rule, e.g. no size cap: `too_large`).
    labels: str = "pbench"
    waive: tuple[str, ...] = ()
    # `extraction.collection_errors`: what the reproduced harness's pytest did on a collection error at base
    # (`grading.COLLECTION_ERRORS`): "continue" (ours), or "stop" under a published rule only.
    collection_errors: str = "continue"
    # `extraction.keep_outcomes`: each PR's extraction outcome also kept in data/outcomes/<season>/<source>/
    # (committed), answering the same PR under the same key on any checkout (tasks_lib/curation/outcomes.py).
    keep_outcomes: bool = False
    path: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def out_dir(self) -> Path:
        return paths.seasons_dir() / self.name

    def target_cutoffs(self) -> dict[str, date]:
        cutoffs = tiering.load_cutoffs()
        unknown = [m for m in self.target_models if m not in cutoffs]
        if unknown:
            raise InputError(
                f"{self.path}: target_models: no cutoff known for {unknown} "
                f"(add them to data/model_cutoffs.toml)"
            )
        return {m: cutoffs[m] for m in self.target_models}


def _err(path, field_name, problem):
    return InputError(f"{path}: field '{field_name}': {problem}")


# The keys of each table of a season definition: any other key is a mistake (`head_run = 5`), refused by name.
KNOWN_KEYS = {
    "": ("name", "sources", "target_models", "internal_only", "window", "distribution", "extraction"),
    "window": ("since", "until"),
    "distribution": ("target", "tolerance", "fail_on_mismatch"),
    "extraction": (
        "head_runs", "base_runs", "max_concurrency", "order", "prs", "labels", "waive", "collection_errors",
        "keep_outcomes",
    ),
}  # fmt: skip


def _refuse_unknown(path, raw: dict) -> None:
    """A key of a season definition that no field reads is an error naming it and the nearest known key."""
    import difflib

    for table, known in KNOWN_KEYS.items():
        value = raw.get(table, {}) if table else raw
        if not isinstance(value, dict):
            continue  # the table's own check says what is wrong with it
        for key in sorted(value):
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                name = f"{table}.{key}" if table else key
                hint = f"; did you mean {(f'{table}.' if table else '') + near[0]!r}?" if near else ""
                raise _err(path, name, f"is not a known field{hint} (known: {', '.join(known)})")


def _str_list(path, raw: dict, key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _err(path, key, f"must be a list of strings, got {value!r}")
    return tuple(value)


def _table(path, table: dict, key: str, name: str) -> dict:
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise _err(path, name, f"must be a table, got {value!r}")
    return value


def _bool(path, table: dict, key: str, default: bool, where: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise _err(path, f"{where}.{key}", f"must be true or false, got {value!r}")
    return value


def _number(path, table: dict, key: str, kind, default, where: str):
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise _err(
            path,
            f"{where}.{key}",
            f"must be a {'number' if kind is float else 'whole number'}, got {value!r}",
        )
    return kind(value)


def _pr_numbers(path, ext: dict) -> tuple[int, ...]:
    value = ext.get("prs", [])
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise _err(path, "extraction.prs", f"must be a list of PR numbers, got {value!r}")
    dupes = sorted({v for v in value if value.count(v) > 1})
    if dupes:
        raise _err(path, "extraction.prs", f"lists PRs more than once: {dupes}")
    return tuple(value)


def _check(path, season: Season) -> None:
    """What a season's fields must hold together (each problem an error naming the field)."""
    if not season.sources:
        raise _err(path, "sources", "must name at least one source")
    if not season.target_models:
        raise _err(path, "target_models", "must name at least one model (see data/model_cutoffs.toml)")
    if season.order not in ORDERS:
        raise _err(path, "extraction.order", f"must be one of {', '.join(ORDERS)}, got {season.order!r}")
    if season.labels not in LABEL_RULES:
        raise _err(
            path, "extraction.labels", f"must be one of {', '.join(LABEL_RULES)}, got {season.labels!r}"
        )
    if season.collection_errors not in COLLECTION_ERRORS:
        raise _err(
            path,
            "extraction.collection_errors",
            f"must be one of {', '.join(COLLECTION_ERRORS)}, got {season.collection_errors!r}",
        )
    if season.collection_errors != "continue" and season.labels == "pbench":
        raise _err(
            path,
            "extraction.collection_errors",
            "'stop' reproduces a published harness: it needs extraction.labels other than 'pbench'",
        )
    if season.waive and not season.prs:
        raise _err(
            path, "extraction.waive", "waives filter reasons for the PRs of extraction.prs only: list them"
        )
    bad_waive = [r for r in season.waive if r.split(":", 1)[0] not in WAIVABLE]
    if bad_waive:
        raise _err(path, "extraction.waive", f"{bad_waive}: only {', '.join(WAIVABLE)} can be waived")
    if season.head_runs < 3 or season.base_runs < 2:
        raise _err(path, "extraction", "head_runs must be >= 3 and base_runs >= 2 (flakiness detection)")


def load_season(name: str, *, sources: list[str] | None = None) -> Season:
    """`data/season_defs/<name>.toml`; `sources` overrides the file's list (CLI --source)."""
    path = paths.data_dir() / "season_defs" / f"{name}.toml"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.toml"))
        raise InputError(f"{path}: no season named {name!r} (known: {', '.join(known) or 'none'})")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{path}: not valid TOML: nested too deeply") from None
    if raw.get("name", name) != name:
        raise _err(path, "name", f"must match the file name {name!r}")
    _refuse_unknown(path, raw)
    window = _table(path, raw, "window", "window")
    dist = _table(path, raw, "distribution", "distribution")
    ext = _table(path, raw, "extraction", "extraction")
    mix = _table(path, dist, "target", "distribution.target")
    bad = [k for k in mix if k not in {d.value for d in StackDomain}]
    if bad:
        raise _err(path, "distribution.target", f"unknown stack domains {bad}")
    mix = {domain: _number(path, mix, domain, float, None, "distribution.target") for domain in mix}
    season = Season(
        name=name,
        sources=tuple(sources) if sources else _str_list(path, raw, "sources"),
        target_models=_str_list(path, raw, "target_models"),
        internal_only=frozenset(_str_list(path, raw, "internal_only")),
        since=tiering.parse_date(window.get("since"), f"{path}: window.since"),
        until=tiering.parse_date(window.get("until"), f"{path}: window.until"),
        target_mix=mix,
        tolerance=_number(path, dist, "tolerance", float, 0.15, "distribution"),
        fail_on_mismatch=_bool(path, dist, "fail_on_mismatch", False, "distribution"),
        head_runs=_number(path, ext, "head_runs", int, 3, "extraction"),
        base_runs=_number(path, ext, "base_runs", int, 2, "extraction"),
        max_concurrency=_number(path, ext, "max_concurrency", int, 2, "extraction"),
        order=ext.get("order", "oldest"),
        prs=_pr_numbers(path, ext),
        labels=ext.get("labels", "pbench"),
        waive=_str_list(path, ext, "waive"),
        collection_errors=ext.get("collection_errors", "continue"),
        keep_outcomes=_bool(path, ext, "keep_outcomes", False, "extraction"),
        path=path,
        raw=raw,
    )
    _check(path, season)
    return season
