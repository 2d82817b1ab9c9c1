"""In-process progress listeners (the CLI's progress bar) for flows that fan out.

They live in this module, and flows reach them as `progress.CALLBACKS`: a module pickles by reference, so a
flow shipped to Dask workers never drags a listener (and the terminal lock it holds) along.
"""

from __future__ import annotations

CALLBACKS: list = []


def notify(*args) -> None:
    for callback in list(CALLBACKS):
        callback(*args)


# Curation's listeners: called with (source name, PR result, status counts so far, PRs to extract); once per
# source with no result when its extractions are planned, before the first.
CURATION: list = []


def notify_curation(*args) -> None:
    for callback in list(CURATION):
        callback(*args)
