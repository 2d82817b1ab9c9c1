"""Reading a TOML table field by field: every problem becomes a SourceError naming the file and the field."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any

from tasks_lib.core.errors import SourceError


class Fields:
    """Reads one TOML table and turns every problem into a SourceError naming file and field."""

    def __init__(self, path: Path, table: dict[str, Any], prefix: str = ""):
        self.path, self.table, self.prefix = path, table, prefix
        if not isinstance(table, dict):
            raise SourceError(path, prefix.rstrip(".") or "<root>", "must be a table")
        self.read: set[str] = set()  # the keys a parser asked for: any other key is unknown

    def refuse_unknown(self, *also: str) -> None:
        """Raise on a key no accessor read (nor `also`, keys read straight from `table`): a misspelt field
        (`test_comand`) is an error naming it and the nearest known one, never a default silently applied."""
        import difflib

        known = self.read | set(also)
        for key in sorted(k for k in self.table if k not in known):
            near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {self._name(near[0])!r}?" if near else ""
            raise self.fail(key, f"is not a known field{hint} (known: {', '.join(sorted(known))})")

    def _name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def fail(self, key: str, problem: str) -> SourceError:
        return SourceError(self.path, self._name(key), problem)

    def str(self, key: str, default: str | None = None, *, required: bool = False, choices=None) -> str:
        self.read.add(key)
        if key not in self.table:
            if required:
                raise self.fail(key, "is missing")
            return default  # type: ignore[return-value]
        value = self.table[key]
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {type(value).__name__}")
        if required and not value.strip():
            raise self.fail(key, "must not be empty")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def str_list(self, key: str, default: list[str] | None = None, *, required: bool = False) -> list[str]:
        self.read.add(key)
        if key not in self.table:
            if required:
                raise self.fail(key, "is missing")
            return list(default or [])
        value = self.table[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "must be a list of strings")
        if required and not value:
            raise self.fail(key, "must not be empty")
        return list(value)

    def bool(self, key: str, default: bool) -> bool:
        self.read.add(key)
        value = self.table.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def int(self, key: str, default: int) -> int:
        self.read.add(key)
        value = self.table.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise self.fail(key, f"must be a positive integer, got {value!r}")
        return value

    def str_map(self, key: str) -> dict[str, str]:
        self.read.add(key)
        value = self.table.get(key, {})
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.fail(key, "must be a table of strings")
        return dict(value)

    def sub(self, key: str, *, required: bool = False) -> Fields | None:
        self.read.add(key)
        if key not in self.table:
            if required:
                raise self.fail(key, "is missing")
            return None
        return Fields(self.path, self.table[key], self._name(key) + ".")

    def date(self, key: str) -> date | None:
        self.read.add(key)
        value = self.table.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, datetime):
            return value.date()
        if isinstance(value, date):
            return value
        if isinstance(value, str):
            try:
                return date.fromisoformat(value)
            except ValueError:
                pass
        raise self.fail(key, f"must be a date (YYYY-MM-DD), got {value!r}")


def rel_path(f: Fields, key: str, value: str) -> str:
    if value.startswith("/") or ".." in value.split("/"):
        raise f.fail(key, f"must be a relative path inside the repository, got {value!r}")
    return value.strip("/")


def rel_dir(f: Fields, key: str, value: str) -> str:
    """A directory of the repository; "." (or "./", "") is its root, kept as ""."""
    value = rel_path(f, key, value)
    while value.startswith("./"):
        value = value[2:]
    return "" if value in (".", "") else value


def prefix(directory: str) -> str:
    """What the repository paths under `directory` start with: "" for the root."""
    return directory.rstrip("/") + "/" if directory else ""
