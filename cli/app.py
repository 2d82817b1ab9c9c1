"""The `pbench` application object and what its commands share: the console, the corpus option, Prefect."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from tasks_lib.core.constants import ExitCode

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="PrototypeBench curation and evaluation harness."
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


def live_bar(fields: str, out: Console | None = None):
    """A live progress bar (description, bar, done/total, `fields`, time) on a terminal; None elsewhere (CI logs,
    pipes): the flows print one plain line per item already, and a bar rendered into a log is cut at 80 columns."""
    out = out or console
    if not out.is_terminal:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
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


def fail(message: str, code: int = ExitCode.HARNESS_ERROR):
    console.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def prefect():
    """Configure Prefect (result storage, cache location, local API) before the first flow runs."""
    from tasks_lib.core import prefect_env

    prefect_env.configure()
