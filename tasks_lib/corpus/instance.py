"""One task instance as a typed record: every contract field (ARCHITECTURE.md, data/schema/instance.schema.json)
an attribute, built by one normaliser of every input shape (`TaskInstance.from_record`: a corpus's JSON Lines,
Parquet and `datasets` rows, SWE-bench's flat records), written back by `to_record` and `to_swebench`.

It is also a read-only mapping of its record (SWE-bench field names plus PrototypeBench's extension), so that
exports, the schema check and analysts see the same fields.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tasks_lib.core.constants import Side
from tasks_lib.core.errors import InputError

# What the engine and grading read; the schema (data/schema/instance.schema.json) checks the rest.
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "fail_to_pass", "pass_to_pass")
SWEBENCH_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "created_at",
    "version",
    "environment_setup_commit",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
FRONTEND_FIELDS = ("FAIL_TO_PASS_FRONTEND", "PASS_TO_PASS_FRONTEND")
EXTRA_FIELDS = ("stack_domain", "contamination_tier", "pr_number", "pr_url", "head_commit", "notes")
_LIST_FIELDS = ("fail_to_pass", "pass_to_pass")
_OPTIONAL_TEXT = ("test_patch_backend", "test_patch_frontend", "hints_text", "notes", "difficulty")
# A Playwright test id: `file:line:column › describe › title` (docs/analysis.md).
_PLAYWRIGHT_ID = re.compile(r"^\S+:\d+:\d+ › ")


@dataclass(frozen=True)
class SideTests:
    """Test ids per side of the stack (pytest node ids; Playwright ids)."""

    backend: tuple[str, ...] = ()
    frontend: tuple[str, ...] = ()

    def of(self, side: Side | str) -> list[str]:
        return list(self.backend if str(side) == Side.BACKEND else self.frontend)

    @classmethod
    def from_record(cls, value: Mapping | None) -> SideTests:
        value = value or {}
        return cls(tuple(value.get("backend") or ()), tuple(value.get("frontend") or ()))


def _domain(record: Mapping) -> str:
    sides = {
        s
        for s in (Side.BACKEND, Side.FRONTEND)
        for key in ("fail_to_pass", "pass_to_pass")
        if record[key].get(s)
    }
    if sides == {Side.FRONTEND}:
        return "frontend_only"
    return "fullstack" if sides == {Side.BACKEND, Side.FRONTEND} else "backend_only"


def _json_list(row: Mapping, key: str, where: str) -> list[str]:
    value = row.get(key)
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: field {key!r} is not a JSON list ({exc.msg})") from None
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise InputError(f"{where}: field {key!r} must be a list of test ids (strings)")
    return list(value)


def sides_of_flat(row: Mapping, where: str = "") -> dict[str, dict[str, list[str]]]:
    """`fail_to_pass` / `pass_to_pass` per side from flat fields: the `*_FRONTEND` fields are the frontend's;
    a Playwright id found in `FAIL_TO_PASS` / `PASS_TO_PASS` (a flat file written by another tool) moves to the
    frontend too, by its shape, never silently onto the backend."""
    who = where or f"instance {row.get('instance_id')!r}"
    out = {}
    for key in _LIST_FIELDS:
        flat = _json_list(row, key.upper(), who)
        frontend = _json_list(row, key.upper() + "_FRONTEND", who)
        moved = [t for t in flat if _PLAYWRIGHT_ID.match(t)]
        out[key] = {
            "backend": [t for t in flat if t not in moved],
            "frontend": list(dict.fromkeys(frontend + moved)),
        }
    return out


def iso_utc(value: Any) -> Any:
    """`created_at` as the record's ISO 8601 string (`2025-07-01T10:00:00Z`) when a reader gave a timestamp:
    Parquet and `datasets` carry it as a UTC timestamp (pandas a `Timestamp`, `datasets` a `datetime`). A naive
    one is UTC: pyarrow's JSON reader, under `datasets.load_dataset("json")`, drops the `Z` it parsed. Any other
    value is left for the schema to judge."""
    if not isinstance(value, datetime):
        return value
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value.isoformat(timespec="microseconds" if value.microsecond else "seconds").replace("+00:00", "Z")


def normalise(row: Mapping) -> dict:
    """Any input shape as the corpus record: Parquet / datasets give numpy arrays, NaN and None where JSON
    Lines gives lists and strings, and a UTC timestamp where it gives an ISO 8601 string (`created_at`); a
    flat SWE-bench record gives JSON strings with the frontend's tests apart (tasks_lib/corpus/swebench.py)."""
    # Parquet via pandas gives NaN for a null string: a missing optional field, like in JSONL.
    out = {k: v for k, v in dict(row).items() if not (isinstance(v, float) and v != v)}
    if all(out.get(k) is None for k in _LIST_FIELDS) and any(k.upper() in out for k in _LIST_FIELDS):
        out.update(sides_of_flat(out))
        if isinstance(out.get("environment"), str):
            try:
                out["environment"] = json.loads(out["environment"] or "{}")
            except json.JSONDecodeError:
                out["environment"] = {}
        for key in ("stack_domain", "contamination_tier"):
            if out.get(key) == "":
                out.pop(key)
    for key in _LIST_FIELDS:
        value = out.get(key)
        if isinstance(value, str):  # a list field given as a JSON string
            value = {"backend": json.loads(value), "frontend": []}
        value = dict(value or {})
        out[key] = {
            side: [str(t) for t in (value.get(side) if value.get(side) is not None else [])]
            for side in ("backend", "frontend")
        }
    out["pr_labels"] = [str(x) for x in (out.get("pr_labels") if out.get("pr_labels") is not None else [])]
    env = out.get("environment") or {}
    out["environment"] = {k: v for k, v in dict(env).items() if v is not None}
    for key in _OPTIONAL_TEXT:
        if out.get(key) is None:
            out.pop(key, None)
    if hasattr(out.get("pr_number"), "item"):
        out["pr_number"] = int(out["pr_number"])
    if "created_at" in out:
        out["created_at"] = iso_utc(out["created_at"])
    return out


def _check(record: Mapping, where: str) -> None:
    """Refused, naming the instance and the field, when what the harness reads is missing or of the wrong
    type (the schema checks the rest)."""
    who = f"{where}: " if where else ""
    iid = record.get("instance_id") if isinstance(record, Mapping) else None
    name = f"instance {iid!r}" if isinstance(iid, str) else "an instance"
    for key in REQUIRED:
        if key not in record:
            raise InputError(f"{who}{name}: field {key!r} is missing")
    for key in _LIST_FIELDS:
        if not isinstance(record[key], Mapping):
            raise InputError(f"{who}{name}: field {key!r} must be an object of test lists per side")
    for key in ("instance_id", "repo", "base_commit", "patch", "test_patch"):
        if not isinstance(record[key], str):
            raise InputError(f"{who}{name}: field {key!r} must be a string")


@dataclass(frozen=True, eq=False)
class TaskInstance(Mapping):
    record: dict[str, Any] = field(repr=False)
    instance_id: str = ""
    repo: str = ""
    base_commit: str = ""
    patch: str = ""
    test_patch: str = ""
    stack_domain: str = ""
    contamination_tier: str = ""
    created_at: str = ""
    fail_to_pass: SideTests = SideTests()
    pass_to_pass: SideTests = SideTests()
    schema_version: str = ""
    pr_number: int | None = None
    pr_url: str = ""
    pr_title: str = ""
    pr_author: str = ""
    pr_labels: tuple[str, ...] = ()
    head_commit: str = ""
    problem_statement: str = ""
    hints_text: str = ""
    test_patch_backend: str = ""
    test_patch_frontend: str = ""
    environment: Mapping[str, Any] = field(default_factory=dict)
    difficulty: str = ""
    notes: str = ""

    @classmethod
    def from_record(cls, record: Mapping, where: str = "") -> TaskInstance:
        """The one way in for a record of any shape (`normalise`), refused, naming the instance and the
        field, when what the harness reads is missing or of the wrong type."""
        if not isinstance(record, Mapping):
            raise InputError(f"{where + ': ' if where else ''}an instance is not an object")
        missing = [k for k in _LIST_FIELDS if k not in record and k.upper() not in record]
        if missing:  # normalising would give it empty lists: an instance with nothing to grade
            _check({k: v for k, v in record.items() if k not in _LIST_FIELDS}, where)
        record = normalise(record)
        _check(record, where)
        if "stack_domain" not in record:  # a flat SWE-bench-style record: the sides with tests say it
            record = {**record, "stack_domain": _domain(record)}
        return cls.of(record)

    @classmethod
    def of(cls, record: Mapping) -> TaskInstance:
        """The typed view of a record the harness already holds (no check, no normalising)."""
        if isinstance(record, TaskInstance):
            return record
        rec = dict(record)
        text = lambda key: rec.get(key) or ""  # noqa: E731
        return cls(
            rec,
            instance_id=rec.get("instance_id", ""),
            repo=rec.get("repo", ""),
            base_commit=rec.get("base_commit", ""),
            patch=rec.get("patch", ""),
            test_patch=rec.get("test_patch", ""),
            stack_domain=rec.get("stack_domain", ""),
            contamination_tier=rec.get("contamination_tier", ""),
            created_at=rec.get("created_at", ""),
            fail_to_pass=SideTests.from_record(rec.get("fail_to_pass")),
            pass_to_pass=SideTests.from_record(rec.get("pass_to_pass")),
            schema_version=text("schema_version"),
            pr_number=rec.get("pr_number"),
            pr_url=text("pr_url"),
            pr_title=text("pr_title"),
            pr_author=text("pr_author"),
            pr_labels=tuple(rec.get("pr_labels") or ()),
            head_commit=text("head_commit"),
            problem_statement=text("problem_statement"),
            hints_text=text("hints_text"),
            test_patch_backend=text("test_patch_backend"),
            test_patch_frontend=text("test_patch_frontend"),
            environment=dict(rec.get("environment") or {}),
            difficulty=text("difficulty"),
            notes=text("notes"),
        )

    def to_record(self) -> dict[str, Any]:
        """The corpus record (a copy: the instance stays as it was)."""
        return copy.deepcopy(self.record)

    def to_swebench(self) -> dict[str, str]:
        """SWE-bench's flat record of this instance: strings only, lists JSON-encoded, the pytest ids in
        FAIL_TO_PASS / PASS_TO_PASS and the Playwright ids apart (`corpus.swebench` writes and reads them)."""
        env = self.environment
        f2p_b, p2p_b = self.tests("backend")
        f2p_f, p2p_f = self.tests("frontend")
        row = {
            "instance_id": self.instance_id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "patch": self.patch,
            "test_patch": self.test_patch,
            "problem_statement": self.problem_statement,
            "hints_text": self.hints_text,
            "created_at": self.created_at,
            # SWE-bench groups instances by the repository's version for its environment specs; ours are keyed
            # by the lock, so the version is the lock's hash (what decides the environment).
            "version": env.get("backend_lock_sha") or env.get("uv_lock_sha") or "",
            # Where the environment is set up: the record's `environment.setup_commit` when it names one.
            "environment_setup_commit": env.get("setup_commit") or self.base_commit,
            "FAIL_TO_PASS": json.dumps(f2p_b),
            "PASS_TO_PASS": json.dumps(p2p_b),
            "FAIL_TO_PASS_FRONTEND": json.dumps(f2p_f),
            "PASS_TO_PASS_FRONTEND": json.dumps(p2p_f),
        }
        for key in EXTRA_FIELDS:
            value = self.get(key)
            row[key] = "" if value is None else str(value)
        row["environment"] = json.dumps(env, sort_keys=True)
        return row

    def tests(self, side: Side | str) -> tuple[list[str], list[str]]:
        """(FAIL_TO_PASS, PASS_TO_PASS) of one side."""
        return self.fail_to_pass.of(side), self.pass_to_pass.of(side)

    def sides(self) -> list[Side]:
        """The sides that have tests to grade, backend first."""
        return [s for s in (Side.BACKEND, Side.FRONTEND) if any(self.tests(s))]

    # -- the record, read-only
    def __getitem__(self, key: str) -> Any:
        return self.record[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.record)

    def __len__(self) -> int:
        return len(self.record)

    def __eq__(self, other: object) -> bool:
        return dict(self.record) == (dict(other) if isinstance(other, Mapping) else other)

    __hash__ = None  # type: ignore[assignment]
