"""How a ``rlnb demo`` that stopped early says so: SIGTERM and SIGHUP raised as ``Terminated`` where it runs, and the
words for where its steps and the earlier output it replaced are (``kept``)."""

from __future__ import annotations

from pathlib import Path

RESTORED = "rlnb demo: the run recorded nothing; the earlier output is back in place"
"""The note on an exception that stopped a demo after ``restore_earlier_output`` put the earlier output back."""

RECORDING = "rlnb demo: the run folder is this run's"
"""The note on an exception that stopped a demo once its ``Session`` made the run folder: only then are the steps in
``out/run`` this demo's (before it, that folder is an earlier demo's, or none)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (its number the argument), raised where the demo runs so that it stops as at Ctrl-C: the run
    folder's steps kept and said."""


def terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def kept(out: str | Path, stop: BaseException) -> str:
    """Where the steps of a demo that stopped early are, when this demo's run folder was written (``RECORDING``), and
    where the earlier output it replaced is: back in place, or set aside."""
    from rlnb.cli.demo.aside import asides, kept_words
    from rlnb.history.store import OPS_FILE

    if said := restored(out, stop):
        return said
    folder = Path(out) / "run"
    ours = RECORDING in getattr(stop, "__notes__", ())
    steps = f"; the steps so far are in {folder} (rlnb.History.load)" if ours and (folder / OPS_FILE).exists() else ""
    return steps + (kept_words(asides(Path(out))) if Path(out).is_dir() else "")


def restored(out: str | Path, stop: BaseException) -> str:
    """The words for a demo that stopped before it recorded anything and put the earlier output back."""
    return (
        f"; it recorded nothing: the earlier output in {out} is back"
        if RESTORED in getattr(stop, "__notes__", ())
        else ""
    )
