"""The builder's "Find LR" controls: a learning-rate range test from the form, beside Muon's lr units
(``rlnb.widgets.muon_units``).

**Find LR** runs ``rlnb.sweep.lr_find`` on a background thread, on a copy of the RunPanel's session
(else a fresh local session of ``model``), probing the panel's task or its own ``step_fn`` (``find_probe``; a
builder on its own: ``lr_find``'s default, the digits task), which its status line names; errors show in the status
line and in ``.error``. Its suggestion (Muon: with the AdamW rate at the config's ratio) shows beside the plot
and changes nothing until **Apply** is clicked (``rlnb.widgets.suggestion``). While the builder is invalid, Find LR is
disabled and says why. Made by a cell run again, it stops the range test of the builder alone its earlier run made.
"""

from __future__ import annotations

import html
import threading
import weakref
from collections.abc import Callable
from typing import Any

import ipywidgets as W

from rlnb import sweep, wire
from rlnb.history.runconfig import LOCAL
from rlnb.viz.cells import cell_run, same_cell_before
from rlnb.viz.draw import png
from rlnb.widgets import find_probe, outage
from rlnb.widgets.controls import IN_ROW
from rlnb.widgets.find_probe import own_step, step_options
from rlnb.widgets.find_prompts import check_task_prompts
from rlnb.widgets.focus_back import FocusBack, to_stopper
from rlnb.widgets.muon_units import RED, Form
from rlnb.widgets.own_probe import GUESSED
from rlnb.widgets.suggestion import Suggestion, unlike_edge

__all__ = ["RED", "Form", "LRFinderControls"]


MADE: weakref.WeakSet[LRFinderControls] = weakref.WeakSet()
"""Every Find LR made and not collected yet (one running is held by its thread): a cell run again finds its own."""


class LRFinderControls(Suggestion):
    """``session`` (set by the RunPanel) is what a range test copies; without one it runs on a fresh
    local session of ``model``. ``options`` go to ``lr_find`` (``steps``, ``task``, ``start_lr``, ...; with no
    ``task`` there, a RunPanel's test probes the panel's, else ``lr_find`` runs the digits task: the status line says
    which; ``find_probe``).
    ``result`` is the last ``LRFind``; ``apply()`` (the Apply button) puts its suggestion in the form."""

    def __init__(self, builder: Form, model: Any = "tiny"):
        super().__init__(builder, model)
        self._options: dict[str, Any] = {"steps": 30}
        self.result: Any = None
        """The last ``LRFind``."""
        self.copies: Any = None
        """The session the button's last range test copies; None: it runs on a fresh local session of ``model``."""
        self._offered = False  # its suggestion is there to apply (not applied yet): Apply is on while the form is valid
        self.error: BaseException | None = None
        self.busy: Callable[[], str | None] = lambda: None
        """Why a range test must wait, or None: a RunPanel says so while its run trains the session."""
        self.on_change: Callable[[], None] = lambda: None
        """Called when a range test starts and ends (a RunPanel disables and enables its own buttons)."""
        self.button = W.Button(description="Find LR", icon="search", tooltip="learning-rate range test")
        self.apply_button = W.Button(
            description="Apply", icon="check", disabled=True, tooltip="put the suggested rate(s) in the form"
        )
        self.status.add_class("rlnb-lr-find-status")
        # hidden until a range test has drawn something: an empty Image shows as a broken-image icon
        self.plot = W.Image(format="png", layout=W.Layout(width="360px", max_width=IN_ROW, display="none"))
        # shown while a test runs on a builder with no RunPanel: nothing in its widgets could end one before
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", layout=W.Layout())
        self.stop_button.layout.display, row = "none", W.HBox(layout=W.Layout(flex_flow="row wrap"))
        self.stop_button.on_click(lambda _: self.stop())
        row.children = [self.button, self.stop_button, self.apply_button, self.scaling]
        self.focus_back = FocusBack(self.button)
        """Gives the focus back to Find LR as the test ends, if the person is still at the panel."""
        # the units under the buttons in a narrow column
        self.widget = W.VBox([row, self.status, self.plot, self.focus_back.widget])
        self._thread: threading.Thread | None = None
        self._going = threading.Event()
        self._ended = threading.Event()  # the button's test has ended, its line said: ``join`` (``running`` from
        self._ended.set()  # before its thread is made, when joining the thread returned at once)
        self._halt = threading.Event()  # ends the range test in flight after its step (``stop``)
        self.stop_at, self.test_line = -float("inf"), outage.TestLine(self._say)  # ``outage.watch_find``
        self._probe = ""  # what the range test in flight runs, for its status line
        self._refocus = False  # the focus may go back to Find LR at the test's end: a click moved it to Stop
        self._stopped = False  # the test a click started was ended by a click on Stop: the person is at the panel
        self.stopped_by: Any = None
        """The RunPanel whose Stop, clicked, ended this test from another panel: the person is at that one."""
        self.button.on_click(lambda _: self._clicked())
        self.apply_button.on_click(lambda _: self.apply())
        self.cell = cell_run()
        """The notebook cell run that made these controls (``rlnb.viz.cells``), or None."""
        self._replace_earlier_run()

    def _replace_earlier_run(self) -> None:
        """Stop the range test of a builder alone made by an earlier run of this cell, saying so on this line: its
        output cleared, with its Stop, it trained out of sight to its end. A builder a RunPanel holds has its Stop."""
        for old in list(MADE):
            if same_cell_before(old.cell, self.cell) and old.running and getattr(old.builder, "panel", None) is None:
                old.stop()
                said = "stopped the range test this cell's earlier run started: it ends after its step in progress"
                self._said = html.escape(said)
                self._say(self._said)
        MADE.add(self)

    @property
    def options(self) -> dict[str, Any]:
        return self._options

    @options.setter
    def options(self, options: Any) -> None:
        """A dict, else a ``TypeError`` here: taken, None would make a click raise into the kernel's log alone."""
        if not isinstance(options, dict):
            raise TypeError(f"lr_finder.options must be a dict of lr_find's options, such as {{'steps': 30}}, got "
                            f"{options!r}"[:300])  # fmt: skip
        self._options = options

    @property
    def running(self) -> bool:
        """Whether a range test is going on its background thread (False from its last moment on, when
        ``on_change`` is called)."""
        return self._going.is_set()

    def sync(self) -> None:
        """Follow the form and the panel: disabled, saying why, while the form is invalid or a run is going
        (the builder calls this on every change, the RunPanel when its run starts and ends)."""
        running, waiting = self.running, self.busy()
        self.button.disabled = running or not self.builder.valid or waiting is not None
        self.apply_button.disabled = running or not self.builder.valid or not self._offered  # applied into a form
        # that cannot be sent, the rate set was no config's
        alone = getattr(self.builder, "panel", None) is None  # a panel's Stop ends it there
        self.stop_button.layout.display = None if running and alone else "none"
        if not running:
            if not self.builder.valid:
                why = html.escape("; ".join(self.builder.errors))  # after the last result, which is not lost to it
                said = f"<span style='color:{RED}'>Find LR needs a valid config — {why}</span>"
                self._say(f"{self._said} · {said}" if self._said else said)
            elif waiting is not None:  # after how the last test ended, if it did: a result is not lost to the wait
                self._say(f"{self._said + ' · ' if self._said else ''}Find LR waits: {html.escape(waiting)}")
            else:
                self._say(self._said)

    def _progress(self, done: int, total: int) -> None:
        if not self._halt.is_set():
            self.test_line.show(f"range test of {self._probe} running … {done}/{total} steps")

    def run(self) -> Any:
        """Run the range test now (in this thread). Shows the suggestion; applies nothing. ``RuntimeError``
        while a RunPanel's run, or the button's range test, goes on the session: called from a cell, it interleaved
        a checkpoint into the run and trained beside it, as the button may not."""
        if not self.builder.valid:
            raise ValueError("Find LR needs a valid config: " + "; ".join(self.builder.errors))
        waiting = self.busy()
        if waiting is not None:
            raise RuntimeError(f"Find LR waits: {waiting}")
        if self.running and threading.current_thread() is not self._thread:  # a cell, while the button's test goes
            raise RuntimeError("Find LR waits: a range test is going (the Find LR button's); stop() or join() it first")
        kind = self.builder.kind
        own = own_step(self.builder, self.options)  # a RunPanel's step_fn, adapted, else None
        options = step_options(self.builder, self.options, own)
        if own is None:  # as the click checks them: a cell's run() copied the session first
            check_task_prompts(options, self.session, self.model)
        options.setdefault("stop", self._halt)
        options.setdefault("progress", self._progress)
        options.setdefault("opened", lambda trial: outage.watch_find(self, trial))  # a remote server's outage said
        if self.session is None and options.get("target", LOCAL) == LOCAL:  # remote: base_model= (connect
            options.setdefault("model", self.model)  # refused model=, so a builder alone never reached a service)
        if self.session is None and kind == wire.MUON:
            options.setdefault("muon_scaling", self.scaling.value)
        self.apply_button.disabled, self._offered = True, False
        probe = find_probe.probe(options, own.objective if own is not None else None)
        self._probe = html.escape(probe)  # the progress says it: by then the first step has checked a guess
        guess = f" ({html.escape(GUESSED)})" if own is not None and not own.known else ""
        step = self.session.step if self.session is not None else 0  # the server answers: its outage is said later
        self.test_line.begin(f"range test of {self._probe}{guess} running …")
        try:
            result = sweep.lr_find(self.builder.params, self.session, **options)  # read at each test: tests replace it
        finally:
            self._halt.clear()  # a stop is for the test it was asked of, not the next one
            self.test_line.end()
        self.plot.value = png(result.figure())
        self.plot.layout.display = None
        self.result = result
        unlike = unlike_edge(kind, options, self.session, self.model, self.builder.params, step)
        self._said = html.escape(self.describe(result, probe, unlike))
        self._offered = result.params is not None
        self.apply_button.disabled = not (self._offered and self.builder.valid)
        if threading.current_thread() is not self._thread:  # the button's test says it once its buttons are back
            self._say(self._said)
        return result

    def start(self) -> None:
        """Run on a background thread (the button); errors show in the status line and in ``.error``."""
        if self.running or not self.builder.valid or self.busy() is not None:
            self.sync()
            return
        try:  # refused here, saying why: a panel's step_fn that returns nothing to follow, a prompt the test can't read
            if own_step(self.builder, self.options) is None:
                check_task_prompts(step_options(self.builder, self.options, None), self.session, self.model)
        except (TypeError, ValueError) as exc:
            self._failed(exc, str(exc))
            self._say(self._said)
            return
        self.error, self.stopped_by = None, None
        self.copies = self.session
        self.button.disabled = True
        self._halt.clear()
        self._ended.clear()
        self._going.set()
        try:
            self._thread = threading.Thread(target=self._run, name="rlnb-lr-find", daemon=True)
            self._thread.start()
        # said: it left Find LR running with no thread, for good; an interrupt of the kernel too, then raised
        except BaseException as exc:  # noqa: BLE001
            if self._thread is not None and self._thread.is_alive():  # started: its end brings Find LR back
                raise
            self._going.clear()
            self._ended.set()
            self._failed(exc, f"not started: {type(exc).__name__}: {exc}")
            self.sync()
            if not isinstance(exc, Exception):
                raise
            return
        self.sync()  # Stop shown on a builder alone
        self.on_change()

    def _clicked(self) -> None:
        """The button disables itself as the test starts: the focus goes on to the RunPanel's Stop (alone: its own),
        which ends it (a keyboard's would drop to the page), and back to Find LR when the test ends if the focus is
        still in the panel or on nothing (``_run``)."""
        stop = getattr(getattr(self.builder, "panel", None), "stop_button", None) or self.stop_button
        if self.running:  # a second click: the focus stays
            self.start()
            return
        self._refocus = True
        stop.on_click(self._stop_clicked)  # before the test starts, whose end removes it (a quick end ran first)
        try:
            self.start()
        finally:
            going = self.running
            if not going:  # refused, over already (the flag then used), or the kernel interrupted mid-start
                self._refocus = False
                stop.on_click(self._stop_clicked, remove=True)
        if going:
            stop.focus()

    def _stop_clicked(self, _stop: W.Button) -> None:
        """A click on the panel's Stop while a test a click started runs: not another panel's start or close, which
        stop it too. The person is at this panel now, not at one whose Stop they clicked before."""
        self._stopped, self.stopped_by = True, None

    def _run(self) -> None:
        """The button's range test; how it ended is said once Find LR and the panel's Step and Run are enabled again
        (said before, a click straight after reading it would hit a disabled button)."""
        try:
            self.run()
        except BaseException as exc:  # noqa: BLE001 - shown in the panel, kept in .error (a SystemExit ended it unseen)
            self._failed(exc, f"{type(exc).__name__}: {exc}")
        finally:
            try:
                self._end()
            finally:
                self._ended.set()

    def _failed(self, exc: BaseException, said: str) -> None:
        """``exc`` kept in ``error``; ``said`` (text) the line to show, in red."""
        self.error, self._said = exc, f"<span style='color:{RED}'>✗ {html.escape(said)}</span>"

    def _end(self) -> None:
        """The buttons back, then how the test ended, then the focus (``focus_back``)."""
        self._going.clear()
        self.on_change()  # a RunPanel's Step and Run back
        self.sync()  # Find LR back, then how the test ended (or why Find LR must wait now)
        stopper, self.stopped_by = self.stopped_by, None
        if stopper is not None:  # a click on another panel's Stop: the person is at that one
            to_stopper(stopper)
        elif self._refocus and not self.button.disabled:  # Stop, disabled again, dropped it to the page
            if self._stopped:  # ended by a click on Stop: the person is at the panel (as RunPanel's refocus)
                self.button.focus()
            else:  # ended by itself: only if no cell the person moved on to holds it (the browser can tell)
                self.focus_back.offer()
        self._refocus = self._stopped = False
        stop = getattr(getattr(self.builder, "panel", None), "stop_button", None) or self.stop_button
        stop.on_click(self._stop_clicked, remove=True)

    def apply(self) -> None:
        """``Suggestion.apply``; Apply stays off once it has set the rate, until the next test's suggestion."""
        super().apply()
        self._offered = not self.apply_button.disabled

    def stop(self) -> None:
        """End the range test in flight after its step in progress; it then suggests from the steps it has
        and says it was stopped. A RunPanel's Stop and close call this: nothing else could end a long test."""
        if self.running:
            outage.stop_test(self)
            self.test_line.show("range test stopping after this step …")

    def join(self, timeout: float = 600.0) -> bool:
        """Wait until the button's range test ``running`` reports has ended, its line said (from its first moment,
        before its thread is made); False if still going after ``timeout`` s (default 10 min)."""
        if threading.current_thread() is self._thread:  # it waited for itself, for the whole deadline
            raise RuntimeError("join() from the range test's own step would wait for itself: stop() ends it")
        return self._ended.wait(timeout)
