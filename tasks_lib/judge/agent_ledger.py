"""The files an agent run writes: the predictions (SWE-bench's JSON Lines) and, in the folder beside them,
`attempts.jsonl` (how each agent run ended). Both are rewritten whole after every instance (a temporary file,
then a rename): a crash never leaves half a line, and what they hold is what a rerun skips."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

from tasks_lib.core import paths
from tasks_lib.core.errors import InputError

ATTEMPTS_FILE = "attempts.jsonl"


def default_predictions(model: str) -> Path:
    """Where an agent run writes when no file is named: data/agents/<model>/predictions.jsonl."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-")[:60] or "model"
    return paths.output_dir() / "agents" / slug / "predictions.jsonl"


def logs_folder(predictions: Path) -> Path:
    """The folder beside a predictions file: `preds.jsonl` -> `preds-agent/`."""
    return predictions.with_name(f"{predictions.stem}-agent")


def _read_jsonl(path: Path, check: Callable[[int, dict], None]) -> dict[str, dict]:
    """Rows of a JSON Lines file this module wrote, by instance id (none: the file does not exist)."""
    if not path.exists():
        return {}
    rows: dict[str, dict] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {number}: not JSON ({exc.msg}); pass another --out") from None
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}: line {number}: not an object with an instance_id; pass another --out")
        check(number, row)
        rows[row["instance_id"]] = row
    return rows


def _write_jsonl(path: Path, rows) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    os.replace(tmp, path)


class Ledger:
    """The predictions file and `attempts.jsonl`, as they are on disk, rewritten whole after each attempt."""

    def __init__(self, predictions: Path, folder: Path, model: str):
        self.predictions_path, self.attempts_path = predictions, folder / ATTEMPTS_FILE

        def same_model(number: int, row: dict) -> None:
            if not isinstance(row.get("model_patch"), str):
                raise InputError(f"{predictions}: line {number}: no model_patch string; pass another --out")
            if row.get("model_name_or_path") != model:
                raise InputError(
                    f"{predictions}: line {number}: a prediction of {row.get('model_name_or_path')!r}, not of "
                    f"--model {model!r} (one predictions file is one model: pass another --out)"
                )

        self.predictions = _read_jsonl(predictions, same_model)
        self.attempts = _read_jsonl(self.attempts_path, lambda n, row: None)
        self._lock = threading.Lock()

    def add(self, done) -> None:
        """Record an `agents.Attempt`: its prediction (if it has one) and its row."""
        with self._lock:
            if done.prediction is not None:
                self.predictions[done.instance_id] = done.prediction
            self.attempts[done.instance_id] = done.to_json()
            self.attempts_path.parent.mkdir(parents=True, exist_ok=True)
            _write_jsonl(self.predictions_path, self.predictions.values())
            _write_jsonl(self.attempts_path, self.attempts.values())
