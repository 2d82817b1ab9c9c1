"""Curation stage 2 (filter): which merged PRs can become tasks, and in which order to try them.

Pure: rules are data (`data/filter_rules.toml` merged with the source's `[filter]` table) and every
function here maps records to records. Each PR gets a verdict with ALL the rules it breaks, as stable
reason codes, and a priority score in [0, 1] (formula in `priority_of` and in the TOML).
"""

from __future__ import annotations

import copy
import fnmatch
import tomllib
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.core import paths
from tasks_lib.core.constants import StackDomain
from tasks_lib.core.errors import InputError, SourceError
from tasks_lib.protocol import globs
from tasks_lib.sources.crawl.base import TIMESTAMP, PullRequest, normalize_login, write_table_atomic
from tasks_lib.sources.record import SourceRecord

RULES_FILE = "filter_rules.toml"

# Reason codes: stable, snake_case; the two parameterised ones carry the matching prefix or label.
BOT_AUTHOR = "bot_author"
NON_TASK_TITLE = "non_task_title"  # non_task_title:<prefix>
NON_TASK_LABEL = "non_task_label"  # non_task_label:<label>
NOT_DEFAULT_BRANCH = "not_default_branch"
OUTSIDE_ERA = "outside_era"
DOCS_ONLY = "docs_only"
NO_TEST_CHANGES = "no_test_changes"
TOO_SMALL = "too_small"
TOO_LARGE = "too_large"
UNSPECIFIABLE = "unspecifiable"  # the curators' record (data/statements/<source>.jsonl) says why

_VARIATION_SELECTOR = "\ufe0f"

FILTER_SCHEMA = pa.schema(
    [
        pa.field("number", pa.int64(), nullable=False),
        pa.field("kept", pa.bool_(), nullable=False),
        pa.field("reasons", pa.list_(pa.string()), nullable=False),
        pa.field("priority", pa.float64(), nullable=False),
        pa.field("stack_domain", pa.string(), nullable=True),
        pa.field("era", pa.string(), nullable=True),
        pa.field("title", pa.string(), nullable=False),
        pa.field("merged_at", TIMESTAMP, nullable=False),
        pa.field("changed_lines", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class TitlePrefix:
    prefix: str
    meaning: str

    @property
    def key(self) -> str:
        return _title_key(self.prefix)


@dataclass(frozen=True)
class PriorityWeights:
    tests: float = 3.0
    closing_issue: float = 2.0
    fullstack: float = 2.0
    moderate_size: float = 1.0
    moderate_min: int = 20
    moderate_max: int = 400
    # Test files of both sides (a pytest test and a Playwright spec in one PR): the instances whose
    # FAIL_TO_PASS can hold both runners. 0 globally; a source with a frontend side raises it.
    both_runners: float = 0.0

    @property
    def total(self) -> float:
        return self.tests + self.closing_issue + self.fullstack + self.moderate_size + self.both_runners


@dataclass(frozen=True)
class FilterRules:
    bot_authors: frozenset[str]
    reject_bot_flag: bool
    require_default_branch: bool
    require_test_changes: bool
    non_task_labels: tuple[str, ...]
    non_task_titles: tuple[TitlePrefix, ...]
    docs_patterns: tuple[str, ...]
    size_ignore_patterns: tuple[str, ...]
    min_changed_lines: int
    max_changed_lines: int
    priority: PriorityWeights


@dataclass(frozen=True)
class FilterVerdict:
    number: int
    kept: bool
    reasons: tuple[str, ...]
    priority: float
    stack_domain: str | None = None
    era: str | None = None
    title: str = ""
    merged_at: datetime | None = None
    changed_lines: int = 0

    def to_row(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons)}


# ---------------------------------------------------------------------------------------------------------
# Rules as data


_LIST_KEYS = ("bot_authors", "non_task_labels", "non_task_titles", "docs_patterns", "size_ignore_patterns")
_BOOL_KEYS = ("reject_bot_flag", "require_default_branch", "require_test_changes")
_WEIGHT_KEYS = tuple(f.name for f in fields(PriorityWeights))
_INT_WEIGHT_KEYS = ("moderate_min", "moderate_max")
_TABLE_KEYS = {"size": ("min_changed_lines", "max_changed_lines"), "priority": _WEIGHT_KEYS}


def default_rules_path() -> Path:
    """`data/filter_rules.toml` under PBENCH_DATA_DIR when it has one, else the committed file."""
    candidate = paths.data_dir() / RULES_FILE
    return candidate if candidate.exists() else paths.PROJECT_ROOT / "data" / RULES_FILE


def merge_rules(global_rules: dict[str, Any], source_rules: dict[str, Any]) -> dict[str, Any]:
    """Source rules on top of global ones: lists extend (unless named in `replace`), tables merge. Pure."""
    merged = copy.deepcopy(global_rules)
    replace = set(source_rules.get("replace", []))
    for key, value in source_rules.items():
        if key == "replace":
            continue
        if isinstance(value, list) and isinstance(merged.get(key), list) and key not in replace:
            merged[key] = merged[key] + [v for v in value if v not in merged[key]]
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _check_keys(where: str, table: dict[str, Any], fail) -> None:
    known = set(_LIST_KEYS) | set(_BOOL_KEYS) | set(_TABLE_KEYS) | {"replace"}
    for key, value in table.items():
        if key not in known:
            raise fail(key, f"unknown filter rule (known: {', '.join(sorted(known))})")
        if key in _TABLE_KEYS:
            if not isinstance(value, dict):
                raise fail(key, "must be a table")
            for sub in value:
                if sub not in _TABLE_KEYS[key]:
                    raise fail(f"{key}.{sub}", f"unknown key (known: {', '.join(_TABLE_KEYS[key])})")
        elif key in _BOOL_KEYS and not isinstance(value, bool):
            raise fail(key, "must be true or false")
        elif (key in _LIST_KEYS or key == "replace") and not isinstance(value, list):
            raise fail(key, "must be a list")
    for name in table.get("replace", []):
        if name not in _LIST_KEYS:
            raise fail("replace", f"{name!r} is not a list rule ({', '.join(_LIST_KEYS)})")


def _strings(value: list[Any], key: str, fail) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v for v in value):
        raise fail(key, "must be a list of non-empty strings")
    return tuple(value)


def _number(table: dict[str, Any], key: str, kind: type, fail, where: str) -> Any:
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) or value < 0:
        raise fail(f"{where}.{key}", f"must be a non-negative {'number' if kind is float else 'integer'}")
    return kind(value)


def rules_from_table(table: dict[str, Any], fail) -> FilterRules:
    """Typed rules from a merged table; `fail(key, problem)` builds the error naming the key."""
    titles = []
    for i, item in enumerate(table.get("non_task_titles", [])):
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("prefix"), str)
            or not item["prefix"].strip()
        ):
            raise fail(f"non_task_titles[{i}].prefix", "is missing")
        titles.append(TitlePrefix(item["prefix"], str(item.get("meaning", ""))))
    size = {"min_changed_lines": 1, "max_changed_lines": 10**9, **table.get("size", {})}
    min_lines = _number(size, "min_changed_lines", int, fail, "size")
    max_lines = _number(size, "max_changed_lines", int, fail, "size")
    if min_lines > max_lines:
        raise fail("size.max_changed_lines", "must not be below size.min_changed_lines")
    prio_table = {**asdict(PriorityWeights()), **table.get("priority", {})}
    weights = PriorityWeights(
        **{
            k: _number(prio_table, k, int if k in _INT_WEIGHT_KEYS else float, fail, "priority")
            for k in _WEIGHT_KEYS
        }
    )
    if weights.total <= 0:
        raise fail("priority", "weights must not all be zero")
    return FilterRules(
        bot_authors=frozenset(
            normalize_login(b).casefold() for b in _strings(table.get("bot_authors", []), "bot_authors", fail)
        ),
        reject_bot_flag=table.get("reject_bot_flag", True),
        require_default_branch=table.get("require_default_branch", True),
        require_test_changes=table.get("require_test_changes", True),
        non_task_labels=_strings(table.get("non_task_labels", []), "non_task_labels", fail),
        non_task_titles=tuple(titles),
        docs_patterns=_strings(table.get("docs_patterns", []), "docs_patterns", fail),
        size_ignore_patterns=_strings(table.get("size_ignore_patterns", []), "size_ignore_patterns", fail),
        min_changed_lines=min_lines,
        max_changed_lines=max_lines,
        priority=weights,
    )


def load_filter_rules(source: SourceRecord, path: Path | str | None = None) -> FilterRules:
    """Global rules (default `data/filter_rules.toml`) with the source's `[filter]` table merged on top."""
    path = Path(path) if path else default_rules_path()
    try:
        global_table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: filter rules file does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None

    def global_fail(key: str, problem: str) -> InputError:
        return InputError(f"{path}: field '{key}': {problem}")

    def source_fail(key: str, problem: str) -> InputError:
        return SourceError(source.path, f"filter.{key}", problem)

    _check_keys(str(path), global_table, global_fail)
    _check_keys(str(source.path), source.filter_rules, source_fail)
    # Validate the source's own values with errors naming its file, then the merged whole.
    rules_from_table(merge_rules({}, source.filter_rules), source_fail)
    return rules_from_table(merge_rules(global_table, source.filter_rules), global_fail)


# ---------------------------------------------------------------------------------------------------------
# Judging PRs (pure)


def _title_key(text: str) -> str:
    return text.replace(_VARIATION_SELECTOR, "").casefold()


def matching_title_prefix(title: str, rules: FilterRules) -> TitlePrefix | None:
    """The longest non-task prefix the title starts with (ignoring leading space, U+FE0F and case)."""
    key = _title_key(title.lstrip())
    hits = [p for p in rules.non_task_titles if key.startswith(p.key)]
    return max(hits, key=lambda p: len(p.key)) if hits else None


def _reason_prefix(prefix: TitlePrefix) -> str:
    return prefix.prefix.replace(_VARIATION_SELECTOR, "").strip()


def non_test_files(pr: PullRequest, source: SourceRecord):
    return [f for f in pr.files if not source.is_test_file(f.path)]


def changed_lines(pr: PullRequest, source: SourceRecord, rules: FilterRules) -> int:
    """Size of the change an agent has to make: non-test files, machine-written files excluded."""
    return sum(
        f.changed_lines
        for f in non_test_files(pr, source)
        if not globs.match_any(f.path, rules.size_ignore_patterns)
    )


def pr_stack_domain(pr: PullRequest, source: SourceRecord) -> StackDomain | None:
    """Backend / frontend / fullstack from the paths the agent must change (the non-test files)."""
    return source.stack_domain([f.path for f in non_test_files(pr, source)])


def size_score(lines: int, rules: FilterRules) -> float:
    w = rules.priority
    if not rules.min_changed_lines <= lines <= rules.max_changed_lines:
        return 0.0
    return 1.0 if w.moderate_min <= lines <= w.moderate_max else 0.5


def priority_of(pr: PullRequest, source: SourceRecord, rules: FilterRules) -> float:
    """Weighted share of the wanted traits, in [0, 1]:
    (tests·has_test_changes + closing_issue·has_closing_issue + fullstack·is_fullstack
     + moderate_size·size_score + both_runners·has_test_files_of_both_sides) / sum of the weights."""
    w = rules.priority
    tests = [p for p in pr.paths if source.is_test_file(p)]
    score = (
        w.tests * bool(tests)
        + w.closing_issue * bool(pr.closing_issues)
        + w.fullstack * (pr_stack_domain(pr, source) == StackDomain.FULLSTACK)
        + w.moderate_size * size_score(changed_lines(pr, source, rules), rules)
        + w.both_runners * (source.stack_domain(tests) == StackDomain.FULLSTACK)
    )
    return round(score / w.total, 6)


def _label_matches(label: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(label.casefold(), pattern.casefold())


def reasons_for(
    pr: PullRequest, source: SourceRecord, rules: FilterRules, unspecifiable: Collection[str] = ()
) -> tuple[str, ...]:
    """Every rule the PR breaks, in a fixed order. Empty means the PR is kept. `unspecifiable`: the instance ids
    the curators leave out (`statements.unspecifiable`)."""
    reasons: list[str] = []
    if (rules.reject_bot_flag and pr.author_is_bot) or normalize_login(
        pr.author
    ).casefold() in rules.bot_authors:
        reasons.append(BOT_AUTHOR)
    prefix = matching_title_prefix(pr.title, rules)
    if prefix is not None:
        reasons.append(f"{NON_TASK_TITLE}:{_reason_prefix(prefix)}")
    for label in dict.fromkeys(pr.labels):
        if any(_label_matches(label, pattern) for pattern in rules.non_task_labels):
            reasons.append(f"{NON_TASK_LABEL}:{label}")
    if rules.require_default_branch and pr.base_ref != pr.default_branch:
        reasons.append(NOT_DEFAULT_BRANCH)
    if source.era_for(pr.merged_at) is None:
        reasons.append(OUTSIDE_ERA)
    if pr.files and all(globs.match_any(p, rules.docs_patterns) for p in pr.paths):
        reasons.append(DOCS_ONLY)
    if rules.require_test_changes and not any(source.is_test_file(p) for p in pr.paths):
        reasons.append(NO_TEST_CHANGES)
    lines = changed_lines(pr, source, rules)
    if lines < rules.min_changed_lines:
        reasons.append(TOO_SMALL)
    if lines > rules.max_changed_lines:
        reasons.append(TOO_LARGE)
    if pr.instance_id in unspecifiable:
        reasons.append(UNSPECIFIABLE)
    return tuple(reasons)


def judge(
    pr: PullRequest, source: SourceRecord, rules: FilterRules, unspecifiable: Collection[str] = ()
) -> FilterVerdict:
    reasons = reasons_for(pr, source, rules, unspecifiable)
    domain = pr_stack_domain(pr, source)
    return FilterVerdict(
        number=pr.number,
        kept=not reasons,
        reasons=reasons,
        priority=priority_of(pr, source, rules),
        stack_domain=str(domain) if domain else None,
        era=source.era_for(pr.merged_at),
        title=pr.title,
        merged_at=pr.merged_at,
        changed_lines=changed_lines(pr, source, rules),
    )


def filter_prs(
    prs: list[PullRequest], source: SourceRecord, rules: FilterRules, unspecifiable: Collection[str] = ()
) -> list[FilterVerdict]:
    """One verdict per PR, in input order."""
    return [judge(pr, source, rules, unspecifiable) for pr in prs]


def kept_prs(prs: Iterable[PullRequest], verdicts: Iterable[FilterVerdict]) -> list[PullRequest]:
    """The kept PRs, highest priority first (ties: lower PR number first): the order to extract them in."""
    by_number = {v.number: v for v in verdicts}
    kept = [pr for pr in prs if pr.number in by_number and by_number[pr.number].kept]
    return sorted(kept, key=lambda pr: (-by_number[pr.number].priority, pr.number))


def reason_counts(verdicts: Iterable[FilterVerdict]) -> Counter[str]:
    """How many PRs break each rule (a PR with two reasons counts under both)."""
    return Counter(reason for v in verdicts for reason in v.reasons)


def rule_of(reason: str) -> str:
    """`non_task_title:📝` → `non_task_title`: the rule, without its parameter."""
    return reason.split(":", 1)[0]


# ---------------------------------------------------------------------------------------------------------
# filter.parquet


def filter_table(verdicts: Iterable[FilterVerdict]) -> pa.Table:
    rows = [v.to_row() for v in sorted(verdicts, key=lambda v: v.number)]
    return pa.Table.from_pylist(rows, schema=FILTER_SCHEMA)


def write_filter_parquet(verdicts: Iterable[FilterVerdict], path: Path | str) -> Path:
    return write_table_atomic(filter_table(verdicts), path)


def read_filter_parquet(path: Path | str) -> list[FilterVerdict]:
    table = pq.read_table(path).select(FILTER_SCHEMA.names).cast(FILTER_SCHEMA)
    return [FilterVerdict(**{**row, "reasons": tuple(row["reasons"])}) for row in table.to_pylist()]
