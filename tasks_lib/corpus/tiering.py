"""Stage 7 of curation: contamination tiers from model cutoffs (data) and a season's target models."""

from __future__ import annotations

import tomllib
from datetime import date, datetime
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.constants import Tier
from tasks_lib.core.errors import InputError


def load_cutoffs(path: Path | None = None) -> dict[str, date]:
    path = path or paths.data_dir() / "model_cutoffs.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: cannot read model cutoffs: {exc}") from None
    out = {}
    for model, entry in raw.get("models", {}).items():
        value = entry.get("cutoff") if isinstance(entry, dict) else None
        try:
            if isinstance(value, datetime):  # a TOML datetime: its day is the cutoff
                out[model] = value.date()
            else:
                out[model] = value if isinstance(value, date) else date.fromisoformat(str(value))
        except ValueError:
            raise InputError(f"{path}: models.{model}.cutoff: not a date (YYYY-MM-DD): {value!r}") from None
    return out


def parse_date(value: str | date | datetime | None, what: str) -> date | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).date()
    except ValueError:
        raise InputError(f"{what}: not a date (YYYY-MM-DD): {value!r}") from None


def assign_tier(
    instance_id: str,
    merged_at: date | datetime | str,
    target_cutoffs: dict[str, date],
    internal_only: set[str] | frozenset[str] = frozenset(),
) -> Tier:
    """`internal_only` by explicit list; `held_out` when merged after any target model's cutoff (that
    model cannot have trained on it); `public` when merged on or before every target model's cutoff."""
    if instance_id in internal_only:
        return Tier.INTERNAL_ONLY
    if not target_cutoffs:
        raise InputError("a season needs at least one target model to assign contamination tiers")
    when = parse_date(merged_at, f"{instance_id}: created_at")
    return Tier.HELD_OUT if any(when > cutoff for cutoff in target_cutoffs.values()) else Tier.PUBLIC


def held_out_relative_to(merged_at: date | datetime | str, model_cutoff: date | str) -> bool:
    """For an evaluation report: was this task merged after the evaluated model's disclosed cutoff?"""
    return parse_date(merged_at, "created_at") > parse_date(model_cutoff, "model cutoff")
