"""The sessions not yet closed, so that a script may exit mid-run and keep every record: the interpreter's
exit closes each of them (``rlnb.lifecycle.shutdown``'s sessions phase)."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from rlnb.lifecycle import shutdown

if TYPE_CHECKING:
    from rlnb.session.session import Session

log = logging.getLogger("rlnb")

OPEN: weakref.WeakSet[Session] = weakref.WeakSet()
"""Every session opened and not yet closed (a ``Session`` adds itself, and ``close`` takes it out)."""


def refuse_shared_history(history: object) -> None:
    """A ``ValueError`` if ``history`` records an open session already: a second session recording into it added
    each of its operations too, and its steps read 1, 1, 2, 2 without a word."""
    owner = next((s for s in list(OPEN) if s.history is history and not s.closed), None)
    if history is not None and owner is not None:
        raise ValueError(
            f"history records the open session {owner.id} already: two sessions recording into one History double "
            "its steps; close that session first, or give this one its own (leave history out, or pass run_id=)"
        )


def _close_open_sessions() -> None:
    """Interpreter exit with operations in flight: stop each session (the running operation finishes or
    stops between tokens, the rest fail SESSION_NOT_ACTIVE), record that, and close its run files. Their
    sinks are flushed next, in the exit's sink phase."""
    for session in list(OPEN):
        try:
            session._close(flush_sinks=False)
        except KeyboardInterrupt:  # the others still close (their files, their records), hurried
            shutdown.interrupted()
        except Exception:  # noqa: BLE001, S110 - exit goes on: one session's failure must not hide the others
            continue


def close_keeping(close: Callable[[], None], raised: BaseException | None) -> None:
    """``close()`` at the end of a ``with`` block. When the block raised, an error of the close is a note on the block's
    error (and a warning), not raised over it: a failed stop hid why the block failed."""
    if raised is None:
        close()
        return
    try:
        close()
    except Exception as exc:  # noqa: BLE001 - the block's own error is the one to see; this one goes with it
        said = f"{type(exc).__name__}: {exc}"
        log.warning("rlnb: closing the session after an error in its with block failed too: %s", said)
        raised.add_note(f"(closing the session then failed too: {said})")


shutdown.on_exit("sessions", _close_open_sessions)
