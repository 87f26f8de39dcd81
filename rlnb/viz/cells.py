"""Which notebook cell is running: a ``LiveView`` made by a cell run again replaces the one its earlier run made.

ipywidgets says nothing when a front end drops a widget's view (a cell's output cleared as it runs again), so a
view left behind followed its history, redrawing, for the kernel's life. The front end's cell id (JupyterLab,
Notebook 7 and VS Code send one with each run, in the execute request's metadata) is what tells a run again of
the same cell from another cell. Where none comes (classic Notebook 6, a plain ``IPython.display``), the message id
of the request being run still tells one run from the next.
"""

from __future__ import annotations

from typing import Any

from IPython import get_ipython


def _parent() -> dict[str, Any] | None:
    """The message the kernel is answering now (an execute request, a widget's comm message), if any."""
    kernel = getattr(get_ipython(), "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)  # ipykernel >= 6
    parent = get_parent() if callable(get_parent) else None
    return parent if isinstance(parent, dict) else None


def cell_run() -> tuple[str, str] | None:
    """The running cell's id and this run's message id; ``None`` outside a kernel, from a front end that sends no
    cell id, or in a widget's callback (a button's click is no cell run)."""
    parent = _parent() or {}
    cell = (parent.get("metadata") or {}).get("cellId")
    run = (parent.get("header") or {}).get("msg_id")
    return (str(cell), str(run)) if cell and run else None


def execute_run() -> str | None:
    """The message id of the code being run now (a cell, with or without a cell id); ``None`` outside a kernel or
    in a widget's callback."""
    header = (_parent() or {}).get("header") or {}
    return str(header["msg_id"]) if header.get("msg_type") == "execute_request" and header.get("msg_id") else None


def same_cell_before(theirs: tuple[str, str] | None, mine: tuple[str, str] | None) -> bool:
    """``theirs`` was an earlier run of the cell running now (``mine``): two views made by one run both stay."""
    return theirs is not None and mine is not None and theirs[0] == mine[0] and theirs[1] != mine[1]
