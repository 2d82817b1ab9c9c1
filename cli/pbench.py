"""`pbench`: the operators', evaluators' and analysts' command line, and the project's composition root: it
parses, then calls flows or the library (which never import it). Thin: heavy modules load lazily.

Exit codes (ARCHITECTURE.md): 0 resolved / success, 1 not resolved (a meaningful result), 2 the harness
could not run (bad input, infrastructure). Never 0 on an error.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import typer
from rich.markup import escape

from cli import agent, corpus, evaluate, ops  # noqa: F401  (their commands register on the app)
from cli.app import app, console
from tasks_lib.core.constants import ExitCode
from tasks_lib.core.errors import InputError, PbenchError


def _on_stop(signum, frame):
    # Every thread sees the stop (the engine checks it while it waits: worker threads stop within seconds);
    # the main thread gets a KeyboardInterrupt, so every `finally` removes its containers.
    from tasks_lib.core import stopping

    stopping.request_stop()
    raise KeyboardInterrupt


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("PBENCH_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _on_stop)
    signal.signal(signal.SIGINT, _on_stop)
    # `--debug` anywhere on the line (or PBENCH_DEBUG=1): an unexpected error shows its traceback.
    debug = "--debug" in sys.argv[1:] or os.environ.get("PBENCH_DEBUG") == "1"
    args = [a for a in sys.argv[1:] if a != "--debug"]
    try:
        rc = app(args=args, standalone_mode=False)
    except typer.Exit as exc:
        rc = exc.exit_code
    except (typer.BadParameter, typer.Abort) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        sys.exit(ExitCode.HARNESS_ERROR)
    except InputError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except PbenchError as exc:
        _print_error(exc)
        sys.exit(ExitCode.HARNESS_ERROR)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]: finished work is kept; rerun the same command to resume")
        sys.exit(130)
    except Exception as exc:
        if callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code"):
            exc.show()  # a usage error (click's, or the copy typer ships): its own message, exit 2
            sys.exit(ExitCode.HARNESS_ERROR)
        if debug:
            raise
        # Never exit 1 by accident (1 is "not resolved" for `pbench score`): an unexpected error is the
        # harness's, exit 2, one line.
        reason = " ".join(str(exc).split()) or "no message"
        console.print(
            f"[red]error:[/red] unexpected {type(exc).__name__}: {escape(reason)}; "
            "rerun with --debug for the traceback",
            highlight=False,
        )
        sys.exit(ExitCode.HARNESS_ERROR)
    sys.exit(rc or 0)


def _print_error(exc: PbenchError) -> None:
    # Messages quote user input ("[acme__app-1]", "[/x]"): print it as written, never as Rich markup.
    console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)


if __name__ == "__main__":
    main()
