"""Which notebook cell is running: a ``LiveView`` made by a cell run again replaces the one its earlier run made.

ipywidgets says nothing when a front end drops a widget's view (a cell's output cleared as it runs again), so a
view left behind followed its history, redrawing, for the kernel's life. The front end's cell id (JupyterLab,
Notebook 7 and VS Code send one with each run, in the execute request's metadata) is what tells a run again of
the same cell from another cell.
"""

from __future__ import annotations

from IPython import get_ipython


def cell_run() -> tuple[str, str] | None:
    """The running cell's id and this run's message id; ``None`` outside a kernel, from a front end that sends no
    cell id, or in a widget's callback (a button's click is no cell run)."""
    kernel = getattr(get_ipython(), "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)  # ipykernel >= 6
    parent = get_parent() if callable(get_parent) else None
    if not isinstance(parent, dict):
        return None
    cell = (parent.get("metadata") or {}).get("cellId")
    run = (parent.get("header") or {}).get("msg_id")
    return (str(cell), str(run)) if cell and run else None


def same_cell_before(theirs: tuple[str, str] | None, mine: tuple[str, str] | None) -> bool:
    """``theirs`` was an earlier run of the cell running now (``mine``): two views made by one run both stay."""
    return theirs is not None and mine is not None and theirs[0] == mine[0] and theirs[1] != mine[1]
