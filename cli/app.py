"""The `pbench` application object and what its commands share: the console, the corpus option, Prefect."""

from __future__ import annotations

import contextlib
import io
import logging
import sys

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.text import Text
from typer.core import TyperCommand

from tasks_lib.core.constants import ExitCode

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="PrototypeBench curation and evaluation harness.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
images_app = typer.Typer(no_args_is_help=True, help="Base, service and environment images.")
app.add_typer(images_app, name="images")
# soft_wrap: never insert line breaks. Scripts, CI logs and operators grep one-line errors and copy paths out
# of them; on a terminal the terminal wraps long lines itself, without breaking a path inside.
console = Console(stderr=True, soft_wrap=True)

DEFAULT_DATASET = "demo"
DATASET_HELP = (
    "Corpus: a season name or folder, a .jsonl/.json/.parquet file, a saved dataset folder, or hf:<id>."
)
# SWE-bench's names for what means the same here (`python -m swebench.harness.run_evaluation` and `swebench
# eval`), accepted beside ours: docs/operations.md has the table, and the flags that have no equivalent.
DATASET_NAMES = ("--dataset", "-d", "--dataset_name")
IDS_NAMES = ("--id", "-i", "--instance_ids", "--instance")


def dataset_option():
    return typer.Option(DEFAULT_DATASET, *DATASET_NAMES, help=DATASET_HELP)


def ids_option():
    return typer.Option(
        [],
        *IDS_NAMES,
        help="Only these instance ids: repeat the option (--id A --id B) or list them (-i A B), as SWE-bench's "
        "--instance_ids.",
    )


def max_workers_option():
    return typer.Option(
        2, "--max-workers", "--max_workers", "-j", "--workers", min=1, help="Instances scored in parallel."
    )


def version(value: bool) -> None:
    if not value:
        return
    from importlib import metadata

    from tasks_lib.core.constants import HARNESS_VERSION, JUDGE_VERSION, SCHEMA_VERSION
    from tasks_lib.judge.reporting import REPORT_SCHEMA_VERSION

    try:
        package = metadata.version("prototypebench-pipeline")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        package = "unknown (not installed)"
    typer.echo(
        f"pbench {package} (harness {HARNESS_VERSION}, judge {JUDGE_VERSION}, instance schema {SCHEMA_VERSION}, "
        f"report schema {REPORT_SCHEMA_VERSION})"
    )
    raise typer.Exit(0)


@app.callback()
def _options(
    _version: bool = typer.Option(
        False, "--version", callback=version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """PrototypeBench curation and evaluation harness."""


class SpacedLists(TyperCommand):
    """A command whose instance-id list also reads SWE-bench's `nargs="+"` form: `-i A B C` is `-i A -i B -i C`.
    Every word after the option up to the next option is one more value (the commands that use this class take
    no positional argument, so no word is taken from one)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread(args, IDS_NAMES))


def spread(args: list[str], names: tuple[str, ...]) -> list[str]:
    """`args` with each run of bare words after one of `names` (or `NAME=value`) given that option each."""
    out: list[str] = []
    current, waiting = None, False  # the list option being read; its first value not seen yet
    for i, word in enumerate(args):
        if word == "--":
            return out + args[i:]
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            current = name if name in names else None
            waiting = current is not None and "=" not in word
            out.append(word)
        elif current is not None and not waiting:
            out += [current, word]
        else:
            waiting = False
            out.append(word)
    return out


def live_bar(fields: str, out: Console | None = None):
    """A live progress bar (description, bar, done/total, `fields`, time) on a terminal; None elsewhere (CI logs,
    pipes): the flows print one plain line per item already, and a bar rendered into a log is cut at 80 columns.
    While it shows, log lines (Prefect's, the flows' prints) are printed above it, never glued to its line."""
    out = out or console
    if not out.is_terminal:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    return _Bar(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields),
        TimeElapsedColumn(),
        console=out,
        transient=False,
        redirect_stdout=False,  # a proxied stdout holds a lock that Dask cannot pickle with task context
        redirect_stderr=False,
    )


class _Bar(Progress):
    """rich's Progress, with every logging handler that writes to this terminal written through its console
    while it shows: its lines go above the bar. (rich's own redirect swaps sys.stdout/sys.stderr, which the
    handlers do not use: each keeps the stream it was made with; and Dask cannot pickle the proxy.)"""

    def __enter__(self):
        bar = super().__enter__()
        self._logs = contextlib.ExitStack()
        self._logs.enter_context(_logs_through(self.console))
        return bar

    def __exit__(self, *exc):
        try:
            self._logs.close()
        finally:
            super().__exit__(*exc)


class _LinesThrough(io.TextIOBase):
    """A text stream whose complete lines `console` prints (above a live display), ANSI styles kept."""

    def __init__(self, out: Console):
        self._out, self._partial = out, ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self._out.is_terminal

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self._out.print(Text("\n").join(Text.from_ansi(line) for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._out.print(Text.from_ansi(self._partial))
            self._partial = ""


@contextlib.contextmanager
def _logs_through(out: Console):
    """Every logging handler writing to this process's terminal streams (or to `out`'s file) writes through
    `out` until the block ends; a handler with a rich console of its own (Prefect's) has that console's file
    swapped too."""
    terminal = {id(f) for f in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__, out.file) if f}
    through = _LinesThrough(out)
    undo = []
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.FileHandler) or not isinstance(handler, logging.StreamHandler):
                continue
            if id(handler.stream) not in terminal:
                continue
            stream = handler.stream
            try:
                handler.setStream(through)
            except AttributeError:  # a read-only stream (logging's last resort: sys.stderr at each call)
                continue
            undo.append((handler.setStream, stream))
            inner = getattr(handler, "console", None)
            if isinstance(inner, Console):
                undo.append((lambda f, c=inner: setattr(c, "file", f), inner.file))
                inner.file = through
    try:
        yield
    finally:
        through.flush()
        for restore, stream in reversed(undo):
            restore(stream)


def fail(message: str, code: int = ExitCode.HARNESS_ERROR):
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def prefect():
    """Configure Prefect (result storage, cache location, local API) before the first flow runs, and start the
    command's temporary API server in the background (`api_server`: it boots while the command imports its
    flow); `prefect_ready()` waits for it before the first flow."""
    from tasks_lib.core import api_server, prefect_env

    prefect_env.configure()
    api_server.start()


def prefect_ready():
    from tasks_lib.core import api_server

    api_server.wait_ready()
