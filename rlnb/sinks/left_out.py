"""A sink dropped before (its library failed in an earlier run) given to a later run: that run is left out of it, and
said so. A sweep gathers what its trials left out (``gathered``) and says it once at its end, on the caller's thread:
said by each trial, the warnings were one per trial, queued on the trial threads and heard only at interpreter exit.
"""

from __future__ import annotations

import threading

from rlnb.history import History
from rlnb.history.runconfig import session_starts
from rlnb.sinks import marks
from rlnb.sinks.base import RunInfo, Sink
from rlnb.sinks.marks import Mark
from rlnb.sinks.points import merge, unsent
from rlnb.sinks.scrubbing import scrub

LISTED = 20
"""Runs a sweep's warning names one by one; the rest are counted."""


def left_out(history: History, sink: Sink, unnamed: str) -> None:
    """Say again that ``sink`` is dropped, naming the run it leaves out (the first warning may have scrolled away cells
    ago; in a sweep, at its end: ``gathered``), and mark the run folder as holding none of it (``rlnb.sinks.marks``),
    so that a session continuing the run with a working sink sends it the whole run; a mark there already (a session
    that streamed the run) stays, and the run is said written there in part, the rest sent by that session."""
    file = marks.path(history.path, sink) if history.path is not None else None
    try:
        mark = marks.read(file) if file is not None else None
    except ValueError:  # a damaged mark: the continuing session says so
        mark = NOTHING
    if file is not None and mark is None:
        marks.write_once(file, NOTHING)
    part = _part(history, mark)
    with _LOCK:
        if sink in _GATHERED:
            _GATHERED[sink].append((history, part))
            return
    name = RunInfo.from_config(dict(history.config), history.path, unnamed).name
    kept = history.path or "session.history, in memory,"
    rest = "the rest" if part else "the whole run"
    later = f"a session continuing run {name} with a new {type(sink).__name__} sink sends it {rest}" if file \
        else "rlnb.export writes it there"  # fmt: skip
    left = "is not written there" if part is None else f"is written there in part: {_steps(part)}"
    sink.note(f"{_dropped(sink)}: run {name} {left}. {kept} has everything: {later}")


NOTHING = Mark(-1, frozenset(), 0)
"""The mark of a run a sink holds none of."""


def _part(history: History, mark: Mark | None) -> tuple[int, int] | None:
    """How many steps of ``history`` are past what ``mark`` says its sink holds (written, or before it was attached:
    never to be sent), which a session continuing the run sends, and of how many; None where it holds none of them
    (or there is no mark)."""
    if mark is None or mark == NOTHING:
        return None
    starts, records, rows = session_starts(dict(history.config)), history.records, history.logged_rows()
    # by session and step, each session's own: a run continued from step 0 has two of each step
    steps = {(p.session, p.step) for p in merge(unsent(records, starts, rows, NOTHING))[0]}
    missed = {(p.session, p.step) for p in merge(unsent(records, starts, rows, mark))[0]}
    return (len(missed), len(steps)) if steps - missed else None


def _steps(part: tuple[int, int], listed: bool = False) -> str:
    """What of a run written in part its sink lacks (``part``: ``_part``'s), said of one run or in a sweep's list."""
    missed, steps = part
    if not missed:  # it holds the run whole, as it was before this session
        return f"its {steps} steps before this session's" if listed else \
            f"it holds its {steps} steps so far, only this session's are not"  # fmt: skip
    return f"{missed} of its {steps} steps not" if listed else \
        f"{missed} of its {steps} steps so far are not, nor are this session's"  # fmt: skip


class gathered:  # noqa: N801 - used as a function: ``with gathered(sinks):`` (a class: no contextlib frame between
    # the warning and the user's line, which ``user_stacklevel`` would take for theirs)
    """While a sweep runs: the runs its trials leave out of a dropped sink among ``sinks`` (``rlnb.connect``'s option,
    unchecked: a trial refuses a bad one), said in one warning per sink when it ends, on this thread; a sweep ended by
    an error leaves it for the next session's start (or exit) to say."""

    def __init__(self, sinks: object) -> None:
        given = [sinks] if isinstance(sinks, Sink) else list(sinks) if isinstance(sinks, list | tuple) else []
        self._given = [s for s in dict.fromkeys(given) if isinstance(s, Sink)]
        self._mine: list[Sink] = []

    def __enter__(self) -> None:
        with _LOCK:
            self._mine = [s for s in self._given if s not in _GATHERED]  # not an outer sweep's
            for sink in self._mine:
                _GATHERED[sink] = []

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        for sink in self._mine:
            with _LOCK:
                runs = _GATHERED.pop(sink)
            if runs:
                sink.note(_said(sink, runs))
            if kind is None:
                sink.say()


def _said(sink: Sink, runs: list[tuple[History, tuple[int, int] | None]]) -> str:
    """One warning for the runs a sweep left out of ``sink``, each by its full name (``<sweep>/<trial>``, as the run
    it was dropped in: the trials' configs name their sweep once annotated, after ``left_out``)."""
    names = sorted(
        RunInfo.from_config(dict(h.config), h.path).name + (f" ({_steps(p, listed=True)})" if p else "")
        for h, p in runs
    )
    shown = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
    kept = "Their run folders have" if all(h.path is not None for h, _ in runs) else "Their session.history has"
    kind, part = type(sink).__name__, any(p for _, p in runs)
    rest = f"; one written in part, a session continuing its run with a new {kind} sink sends the rest" * part
    return (f"{_dropped(sink)}: {len(names)} other trial{'s' * (len(names) > 1)} of the sweep "
            f"{'are' if len(names) > 1 else 'is'} not written there{', or only in part' * part}: {shown}. {kept} "
            f"everything: rlnb.export(run_path, rlnb.sinks.{kind}(...)) writes a trial there{rest}")  # fmt: skip


def _dropped(sink: Sink) -> str:
    error = sink.error
    where = f" while writing run {sink.dropped_in}" if sink.dropped_in else ""
    return f"rlnb.sinks.{type(sink).__name__} was dropped{where} ({type(error).__name__}: {scrub(str(error))})"


_LOCK = threading.Lock()
_GATHERED: dict[Sink, list[tuple[History, tuple[int, int] | None]]] = {}
"""The dropped sinks of the sweeps running now, each with the runs left out of it."""
