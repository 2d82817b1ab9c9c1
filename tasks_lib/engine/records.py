"""What one engine run is asked to do, and what it found."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from tasks_lib.core.constants import Outcome, RunStatus, Side
from tasks_lib.protocol import wire
from tasks_lib.sources.record import SourceRecord

# Pinned so that the same patch gets the same verdict: hash seeds, time zone, locale.
PINNED_ENV = {
    "TZ": "UTC",
    "PYTHONHASHSEED": "0",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/root",
    "CI": "true",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}
OUTPUT_CAP_BYTES = wire.OUTPUT_CAP_BYTES  # the protocol's (tasks_lib/protocol/wire.py): both sides read it
DB_ALIAS = "db"
DB_PORT = 5432


def service_aliases(source: SourceRecord) -> list[str]:
    """The services' names on the run's private network: the first one "db", then "db1", "db2"..."""
    return [DB_ALIAS if i == 0 else f"{DB_ALIAS}{i}" for i in range(len(source.backend.services))]


@dataclass(frozen=True)
class PatchInput:
    """One patch of the ordered chain. After an untrusted patch, every protected file it touched is put back
    to base inside the container, so an edited test can never count."""

    name: str
    diff: str
    untrusted: bool = False


@dataclass(frozen=True)
class RunRequest:
    source: SourceRecord
    repo: Path  # the source's cached bare clone (repos.repo_dir)
    commit: str
    log_dir: Path
    patches: tuple[PatchInput, ...] = ()
    selection: tuple[str, ...] = ()
    side: Side = Side.BACKEND
    timeout_s: int | None = None
    continue_on_collection_errors: bool = True
    label: str = ""
    # Test-runner plugins the run may load (entry-point names), None: every one of the run's image.
    pytest_plugins: tuple[str, ...] | None = None
    output_cap: int = OUTPUT_CAP_BYTES
    # The tests the run is graded on (FAIL_TO_PASS and PASS_TO_PASS ids): the witnesses take their shape.
    graded: tuple[str, ...] = ()
    # The caller's environment specs at `commit` (a scoring's `images.EnvSpecBook`, which has worked out the
    # same chains for the image key and the tooling check); None: the engine works them out.
    specs: object | None = None

    @property
    def untrusted(self) -> bool:
        return any(p.untrusted for p in self.patches)


@dataclass
class RunResult:
    status: RunStatus
    tests: dict[str, Outcome] = field(default_factory=dict)
    suite_ran: bool = False
    collection_errors: list[str] = field(default_factory=list)
    exit_code: int | None = None
    exit_code_mismatch: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    log_dir: str = ""
    image: str = ""
    image_id: str = ""
    image_built: bool = False
    lock_sha: str = ""
    patch_methods: dict[str, str | None] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)
    restored_why: dict[str, str] = field(default_factory=dict)
    # JUnit vs pytest's own summary in the piped output: any disagreement means a report was tampered
    # with (or a harness bug); never a pass.
    report_disagreements: list[str] = field(default_factory=list)
    # What the run's guards saw: protected files changed, runner-relevant files created, runner modules
    # replaced, witnesses with the wrong outcome, records of the run that disagree. Never a pass.
    tampering: list[str] = field(default_factory=list)
    # A must-pass witness that did not pass: tampering only in a run that would otherwise be a pass.
    witness_doubts: list[str] = field(default_factory=list)
    blame: str = ""
    messages: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    # Files of the snapshot whose content the local mirror lacks (a partial fetch): written empty.
    stubbed_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = str(self.status)
        d["tests"] = {k: str(v) for k, v in self.tests.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunResult:
        d = dict(d)
        d["status"] = RunStatus(d["status"])
        d["tests"] = {k: Outcome(v) for k, v in d["tests"].items()}
        d.setdefault("stubbed_files", [])
        d["witness_doubts"] = d.pop("witness_doubts", d.pop("canary_doubts", []))
        return cls(**d)
