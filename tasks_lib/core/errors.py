"""Errors that carry what an operator needs: which input, which instance, which log."""

from __future__ import annotations

from pathlib import Path


class PbenchError(Exception):
    """Base error. `instance_id` and `log_path` say where to look when one item of a batch fails."""

    def __init__(self, message: str, *, instance_id: str | None = None, log_path: Path | str | None = None):
        self.message = message
        self.instance_id = instance_id
        self.log_path = str(log_path) if log_path else None
        parts = [message]
        if instance_id:
            parts.insert(0, f"[{instance_id}]")
        if self.log_path:
            parts.append(f"(log: {self.log_path})")
        super().__init__(" ".join(parts))


class InputError(PbenchError):
    """Bad input from a user: a file, a field, a flag. Commands exit 2 on it."""


class SourceError(InputError):
    """A source record that is missing a field or has a wrong value."""

    def __init__(self, path: Path | str, field: str, problem: str):
        self.path = str(path)
        self.field = field
        super().__init__(f"{path}: field '{field}': {problem}")


class ImageBuildError(PbenchError):
    """An image could not be built; `log_path` holds the build log."""


class InfraError(PbenchError):
    """The Docker engine or the host failed (not the patch, not the tests)."""


def json_problem(exc: ValueError) -> str:
    """What a `json.JSONDecodeError` says, with its position: "Expecting ',' delimiter at column 20",
    "Unterminated string starting at column 17" (its own message may end in "at", waiting for the column)."""
    msg, column = getattr(exc, "msg", str(exc)), getattr(exc, "colno", None)
    if column is None:
        return msg
    return f"{msg} column {column}" if msg.endswith(" at") else f"{msg} at column {column}"
