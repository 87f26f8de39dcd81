"""``LiveView``: one figure and one table that stay up to date in place while a run goes on.

An ``ipywidgets.VBox`` of an ``Image`` (the PNG of a matplotlib ``Figure`` drawn on the Agg canvas,
never through pyplot) and an ``HTML`` table of the latest operations. Assigning a widget's value works
from any thread and while a cell is still running, in JupyterLab, Notebook 7, VS Code and Voila, with
no custom front-end and no ``clear_output``: nothing flickers. The figure's artists are made once and
then given new data; redraws are throttled::

    view = LiveView(session.history, metrics=("reward",))
    display(view)
    for i in range(steps):
        ...  # submit operations; the view follows
"""

from __future__ import annotations

import html
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from rlnb.history import History, Record, steps_table
from rlnb.plots import STATUS_COLORS, decimate, png, short

HEADERS = ("seq", "kind", "status", "error", "step", "latency")
"""Columns of the live table of operations."""


class LiveView:
    """Loss, gradient norm (with the clip threshold; Muon runs also their two partial norms) and each
    of ``metrics`` from ``history.logged``, plus the latest ``rows`` operations (kind, status, error code,
    latency). Redraws follow ``history.on_record`` (backend threads) and ``history.on_log``, at most once
    per ``every`` seconds, with a trailing redraw so the last change always shows. ``refresh()`` redraws
    now; ``close()`` stops following. ``widget`` is the box."""

    def __init__(self, history: History, metrics: Sequence[str] = (), every: float = 0.5, rows: int = 8) -> None:
        if every < 0:
            raise ValueError(f"every must be >= 0 seconds, got {every}")
        self.history = history
        self.metrics = tuple(metrics)
        self.every = every
        self.rows = rows
        self.redraws = 0
        """How many times the figure and table were redrawn."""
        self._lock = threading.Lock()  # guards the schedule below
        self._draw_lock = threading.Lock()  # one redraw at a time
        self._timer: threading.Timer | None = None
        self._last = -math.inf  # time.monotonic() of the last scheduled redraw
        self._closed = False

        n = 2 + len(self.metrics)
        self.figure = Figure(figsize=(4.2 * n, 3.0), dpi=80, layout="constrained")
        FigureCanvasAgg(self.figure)  # attach an Agg canvas once; plots.png reuses it
        axes = self.figure.subplots(1, n)
        self._axes = list(axes)
        axes[0].set(xlabel="optimizer step", title="loss")
        axes[1].set(xlabel="optimizer step", title="gradient norm (pre-clip)")
        # Columns of history.steps, then of history.logged, each with its line.
        self._step_lines: dict[str, Line2D] = {"loss": axes[0].plot([], [], color="C0")[0]}
        self._step_lines["grad_norm"] = axes[1].plot([], [], color="C1", label="global")[0]
        if history.config.get("optimizer") == "muon":
            self._step_lines["grad_norm_muon"] = axes[1].plot([], [], color="C4", label="Muon matrices")[0]
            self._step_lines["grad_norm_adam"] = axes[1].plot([], [], color="C2", label="AdamW params")[0]
        self._step_lines["grad_clip_norm"] = axes[1].plot([], [], ls="--", color="0.4", label="clip threshold")[0]
        axes[1].legend(loc="upper right", fontsize="small")
        self._grad_note = self._note(axes[1])
        self._metric_lines: dict[str, tuple[Line2D, Text]] = {}
        for ax, name in zip(axes[2:], self.metrics, strict=True):
            ax.set(xlabel="optimizer step", title=name)
            self._metric_lines[name] = ax.plot([], [], color="C2")[0], self._note(ax)

        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.table = widgets.HTML()
        self.widget = widgets.VBox([self.image, self.table])
        self._unsubscribe = [history.on_record(self._on_change), history.on_log(self._on_change)]
        self.refresh()

    @staticmethod
    def _note(ax: Axes) -> Text:
        return ax.text(0.5, 0.5, "", transform=ax.transAxes, ha="center", va="center", wrap=True, color="0.35")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"<LiveView of {self.history!r}, {self.redraws} redraws>"

    # -- scheduling ------------------------------------------------------------------------------

    def _on_change(self, _change: Any) -> None:
        """On a backend thread (a record) or yours (a ``log``): schedule a redraw, never draw here."""
        with self._lock:
            if self._closed or self._timer is not None:
                return  # a redraw is already due, and it will read this change
            wait = max(0.0, self._last + self.every - time.monotonic())
            self._timer = threading.Timer(wait, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
            # From here a new change schedules the next redraw, which then reads it: none is lost.
            self._last = time.monotonic()
        self._redraw()

    def refresh(self) -> None:
        """Redraw now, on this thread."""
        with self._lock:
            self._last = time.monotonic()
        self._redraw()

    def close(self) -> None:
        """Stop following the history (the widgets keep showing the last state)."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            unsubscribe, self._unsubscribe = self._unsubscribe, []
        for u in unsubscribe:
            u()

    # -- drawing ---------------------------------------------------------------------------------

    def _redraw(self) -> None:
        with self._draw_lock:
            ops, logged = self.history.df, self.history.logged
            steps = steps_table(ops, logged)
            for col, line in self._step_lines.items():
                values = steps[col].where(steps[col] > 0) if col == "grad_clip_norm" else steps[col]  # 0 = off
                line.set_data(*decimate(steps["step"], values))
            reasons = ops["na_reason"].dropna()
            reason = str(reasons.iloc[-1]) if len(reasons) else "no gradient norm yet"
            self._grad_note.set_text("" if steps["grad_norm"].notna().any() else reason)
            for name, (line, note) in self._metric_lines.items():
                has = name in logged.columns and logged[name].notna().any()
                xs, ys = decimate(logged["step"], logged[name]) if has else decimate([], [])
                line.set_data(xs, ys)
                note.set_text("" if has else f"no {name!r} logged yet")
            for ax in self._axes:
                ax.relim()
                ax.autoscale_view()
            self.image.value = png(self.figure)
            self.table.value = self._table(self.history.records[-self.rows :])
            self.redraws += 1

    @staticmethod
    def _table(records: list[Record]) -> str:
        now = time.time()
        cells = "".join(f"<th style='text-align:left;padding:0 8px'>{h}</th>" for h in HEADERS)
        body = []
        for r in reversed(records):
            end = r.finished_at if not math.isnan(r.finished_at) else now
            latency = f"{end - r.submitted_at:.2f} s" + ("" if not math.isnan(r.finished_at) else " …")
            color = to_hex(STATUS_COLORS.get(r.status, "0.5"))
            row = (
                str(r.seq),
                html.escape(r.kind),
                f"<span style='color:{color}'>&#9632;</span> {html.escape(short(r.status).lower())}",
                f"<span title='{html.escape(r.error_message or '')}'>{html.escape(short(r.error_code))}</span>",
                "" if r.step is None else str(r.step),
                latency,
            )
            body.append("<tr>" + "".join(f"<td style='padding:0 8px'>{c}</td>" for c in row) + "</tr>")
        return f"<table style='font-size:small'><tr>{cells}</tr>{''.join(body)}</table>"
