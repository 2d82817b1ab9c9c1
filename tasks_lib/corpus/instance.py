"""One task instance as a typed record, loaded and checked once (corpus loading), read by attribute.

It is also a read-only mapping of its record (SWE-bench field names plus PrototypeBench's extension, as
ARCHITECTURE.md gives them), so that exports, the schema check and analysts see the same fields.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks_lib.core.constants import Side
from tasks_lib.core.errors import InputError

# What the engine and grading read; the schema (data/schema/instance.schema.json) checks the rest.
REQUIRED = ("instance_id", "repo", "base_commit", "patch", "test_patch", "fail_to_pass", "pass_to_pass")


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

    @classmethod
    def load(cls, record: Mapping, where: str = "") -> TaskInstance:
        """A record of a corpus: refused, naming the instance and the field, when what the harness reads is
        missing or of the wrong type."""
        who = f"{where}: " if where else ""
        iid = record.get("instance_id") if isinstance(record, Mapping) else None
        name = f"instance {iid!r}" if isinstance(iid, str) else "an instance"
        if not isinstance(record, Mapping):
            raise InputError(f"{who}{name} is not an object")
        for key in REQUIRED:
            if key not in record:
                raise InputError(f"{who}{name}: field {key!r} is missing")
        for key in ("fail_to_pass", "pass_to_pass"):
            if not isinstance(record[key], Mapping):
                raise InputError(f"{who}{name}: field {key!r} must be an object of test lists per side")
        for key in ("instance_id", "repo", "base_commit", "patch", "test_patch"):
            if not isinstance(record[key], str):
                raise InputError(f"{who}{name}: field {key!r} must be a string")
        if "stack_domain" not in record:  # a flat SWE-bench-style record: the sides with tests say it
            record = {**record, "stack_domain": _domain(record)}
        return cls.of(record)

    @classmethod
    def of(cls, record: Mapping) -> TaskInstance:
        """The typed view of a record the harness already holds (no check)."""
        if isinstance(record, TaskInstance):
            return record
        rec = dict(record)
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
        )

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
