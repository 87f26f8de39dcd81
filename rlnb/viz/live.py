"""``LiveView``: plots and a per-step table that stay up to date in place while a run goes on.

An ``ipywidgets.VBox``: EMA and log-y toggles, one small PNG ``Image`` per panel (each a matplotlib
figure on the Agg canvas, never pyplot, drawn as ``rlnb.viz.livepanels`` says), a table of the latest
optimizer steps with the raw operations and the RL metrics one tab away, and the latest RL step's completions
in a collapsed ``Accordion`` (their HTML is ``rlnb.viz.livetables``). Assigning a widget's value works from
any thread and while a cell is still running, in JupyterLab, Notebook 7, VS Code and Voila, with no custom
front end and no ``clear_output``: nothing flickers. Redraws are throttled (``rlnb.viz.throttle``), and each costs the
same at any length of run: new steps are appended to decimated series (``rlnb.viz.livefig``), only
panels whose data changed are drawn, and mostly only their lines::

    view = LiveView(session.history, metrics=("reward",))
    display(view)
    for i in range(steps):
        ...  # submit operations, history.log(step, reward=...); the view follows
"""

from __future__ import annotations

import html
import uuid
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets

from rlnb import wire
from rlnb._input.checks import check_bool, check_int, check_seconds
from rlnb.history import History
from rlnb.text.prompts import check_text
from rlnb.viz.lines import check_ema
from rlnb.viz.livefeed import feed
from rlnb.viz.livefig import Panel
from rlnb.viz.livepanels import draw_panel, new_panel
from rlnb.viz.livetables import completions_html, ops_html, rl_html, steps_html
from rlnb.viz.names import long_name
from rlnb.viz.openviews import CLOSE_WAIT, OPEN, opened, shown
from rlnb.viz.outputs import Outputs
from rlnb.viz.series import Series
from rlnb.viz.throttle import Throttle


class LiveView:
    """Panels for each of ``metrics`` (figures given to ``history.log``; ``None``: every one, as it
    appears; the ``reward`` panel draws ``eval/accuracy`` too, as the overview does, unless it has a panel of its
    own), the loss (``loss=False`` leaves it out: the GRPO loss is ≈0 by construction, watch the
    reward), the pre-clip gradient norm (Muon runs also their two partial norms; the clip threshold
    while clipping is on) and the learning rate; below them the latest ``rows`` optimizer steps, the raw
    operations and the RL metrics (``rlnb.tasks.RL_METRICS``, as ``rl_step`` logs them) one tab away, and
    the latest RL step's prompts, completions, rewards and advantages in a collapsed ``completions``
    accordion (escaped: a completion is any text a model wrote).

    Redraws follow ``history.on_record`` (backend threads) and ``history.on_log``, at most once per
    ``every`` seconds, with a trailing redraw so the last change always shows. ``refresh()`` redraws
    now; ``close()`` stops following, and so does closing ``widget`` (``widget.close()``, ``Widget.close_all()``)
    or running its notebook cell again (the new view of the same history replaces it: ``rlnb.viz.cells``).
    ``widget`` is the box; ``ema`` the smoothing of the EMA toggle.
    """

    def __init__(
        self,
        history: History,
        metrics: Sequence[str] | None = (),
        every: float = 0.5,
        rows: int = 8,
        *,
        loss: bool = True,
        learning_rate: bool = True,
        ema: float = 0.9,
    ) -> None:
        if not isinstance(history, History):  # LiveView(session): "'Session' object has no attribute 'step_log'"
            hint = ": pass session.history" if hasattr(history, "history") else ""
            raise TypeError(f"LiveView takes a History, got {type(history).__name__}{hint}")
        every = check_seconds("every", every)  # NaN would redraw at every change; inf or 1e300 freeze the view (the
        # timer thread's OverflowError, in the kernel's log)
        check_ema(ema)
        rows = check_int("rows", rows, 1)  # rows=0 would say "no completed optimizer step yet" under steps that exist
        loss, learning_rate = check_bool("loss", loss), check_bool("learning_rate", learning_rate)  # None: int + None
        self.history = history
        self.auto = metrics is None
        self.metrics: list[str] = [] if metrics is None else [metrics] if isinstance(metrics, str) else list(metrics)
        if not all(isinstance(m, str) and m.strip() for m in self.metrics):  # [5]: "unsupported operand type(s) for
            raise TypeError(f"metrics must be the names of logged figures, got {self.metrics!r}")  # +: 'int' and 'str'"
        for m in self.metrics:  # the panel's title failed to draw, in FT2Font.set_text; history.log refuses one too
            check_text(m, f"LiveView: the metric name {m!r}")
        clash = {"loss", "grad_norm", "learning_rate"} & set(self.metrics)
        if clash:
            raise ValueError(f"metrics may not be named {sorted(clash)}: those panels are built in")
        self.every, self.rows, self.ema = every, rows, ema
        self.redraws = 0
        """How many times the view was brought up to date."""
        self._throttle = Throttle(self._redraw, every)
        self._rows_seen = self._logs_seen = 0
        self._generation = history.step_log.generation
        self._restyle = True

        self.series: dict[str, Series] = {}
        """Every line's data, by column name (``reward``, ``loss``, ``grad_norm``, ...)."""
        self.panels: dict[str, Panel] = {}
        """Panels by name: each metric, ``loss``, ``grad_norm``, ``learning_rate``."""
        self.images: dict[str, widgets.Image] = {}
        auto = widgets.Layout(width="auto")
        self.ema_toggle = widgets.Checkbox(value=False, description=f"EMA {ema:g}", indent=False, layout=auto)
        self.log_toggle = widgets.Checkbox(value=False, description="log y", indent=False, layout=auto)
        self.plots = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap"))
        self.steps_table = widgets.HTML()
        self._scope = f"rlnb-steps-{uuid.uuid4().hex}"
        """The steps table's own class: its style reaches no other table of the page (saved outputs' included)."""
        self.ops_table = widgets.HTML()
        self.rl_table = widgets.HTML()
        self.tables = widgets.Tab(
            children=[self.steps_table, self.ops_table, self.rl_table], titles=("steps", "operations", "RL metrics")
        )
        self.completions_table = widgets.HTML()
        self.completions = widgets.Accordion(
            children=[self.completions_table], titles=("completions: none yet",), selected_index=None
        )
        self._completions_seen: list[dict[str, Any]] | None = None
        toggles = widgets.HBox([self.ema_toggle, self.log_toggle])
        self.error: Exception | None = None
        """Why the last redraw failed (shown above the plots), None once one succeeds."""
        self.message = widgets.HTML(layout=widgets.Layout(display="none"))
        self.widget = widgets.VBox([toggles, self.message, self.plots, self.tables, self.completions])
        self.widget.add_class("rlnb-live")
        # panels sized for as many to a row of a laptop's notebook, up to four (and four where more are to come)
        self._per_row = 4 if self.auto else len(self.metrics) + 1 + loss + learning_rate
        for name in self.metrics:
            self._add_panel(name, long_name(name), "C2")
        if loss:
            self._add_panel("loss", "loss", "C0")
        self._add_panel("grad_norm", "gradient norm (pre-clip)", "C1")
        if learning_rate:
            self._add_panel("learning_rate", "learning rate", "C3")
        self.ema_toggle.observe(self._on_style, names="value")
        self.log_toggle.observe(self._on_style, names="value")
        self.tables.observe(lambda _: self._draw_tabs(), names="selected_index")
        self.completions.observe(lambda _: self._draw_completions(force=True), names="selected_index")
        self._unsubscribe = [history.on_record(self._on_change), history.on_log(self._on_change)]
        self.widget.observe(self._on_comm, names="comm")
        self.cell: tuple[str, str] | None = None
        """The notebook cell, and its run, that made the view (``rlnb.viz.cells``)."""
        self.outputs = Outputs()
        """Where the view was shown."""
        opened(self)
        self.refresh()

    def _add_panel(self, name: str, title: str, color: str) -> None:
        muon = self.history.config.get("optimizer") == wire.MUON
        panel = new_panel(name, title, color, self.series, self.ema, self.metrics, muon=muon, per_row=self._per_row)
        self.panels[name] = panel
        top = min(p.top for p in self.panels.values())  # every axes as tall, under the tallest title
        for each in self.panels.values():
            each.align_top(top)
        self.images[name] = widgets.Image(
            format="png", layout=widgets.Layout(width=f"{panel.canvas.get_width_height()[0]}px")
        )
        self.plots.children = [*self.plots.children, self.images[name]]

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _ipython_display_(self) -> None:
        """``display(view)`` or a cell's value, in outputs with display ids (``rlnb.viz.outputs``): shown again by
        the same run, in place; where the front end sends no cell id, a newer view of the same History shown by a
        later run replaces this one's outputs and closes it (``rlnb.viz.openviews``)."""
        shown(self)
        self.outputs.show(self.widget)

    def __repr__(self) -> str:
        return f"<LiveView of {self.history!r}, {self.redraws} redraws>"

    def _on_comm(self, change: Any) -> None:
        """``widget.close()`` or ``Widget.close_all()`` (the comm set to None): a view nobody sees stops following."""
        if change["new"] is None:
            self.close()

    def _on_change(self, _change: Any) -> None:
        """On a backend thread (a record) or yours (a ``log``): schedule a redraw, never draw here."""
        self._throttle.poke()

    def _on_style(self, _change: Any) -> None:
        self._restyle = True
        self.refresh()

    def refresh(self) -> None:
        """Bring the view up to date now, on this thread (a failure is raised, and shown as ``_redraw`` says)."""
        self._throttle.now()

    def close(self) -> None:
        """Stop following the history (the widgets keep showing the last state), once a redraw in progress
        has ended (at most ``CLOSE_WAIT`` seconds)."""
        OPEN.discard(self)
        unsubscribe, self._unsubscribe = self._unsubscribe, []
        for u in unsubscribe:
            u()
        self._throttle.close(CLOSE_WAIT)

    # -- drawing ---------------------------------------------------------------------------------

    def _redraw(self) -> None:
        """Draw; a failure is shown above the plots and kept in ``error``, then raised: a timer thread's has
        nobody to raise to (it goes to the kernel's log), and the view would freeze without a word."""
        try:
            self._draw()
        except Exception as exc:
            self.error = exc
            said = html.escape(f"{type(exc).__name__}: {exc}", quote=False)
            self.message.value = f"<span style='color:#b00020'>✗ the live view could not redraw: {said}</span>"
            self.message.layout.display = None
            raise
        if self.error is not None:
            self.error = None
            self.message.layout.display = "none"

    def _draw(self) -> None:
        log = self.history.step_log
        if log.generation != self._generation:  # the step log started over (rare): so do the lines
            self._generation, self._rows_seen, self._logs_seen, self._restyle = log.generation, 0, 0, True
            self.series = {key: Series(self.ema) for key in self.series}
        rows = log.settled(self._rows_seen)
        logs = log.logged_since(self._logs_seen)
        self._rows_seen += len(rows)
        self._logs_seen += len(logs)
        changed = feed(self, rows, logs)
        if self._restyle:
            changed = set(self.panels)
            self._restyle = False
        try:
            for name in changed:
                self._draw_panel(name)
        except Exception:
            self._restyle = True  # the next redraw draws every panel again, in one style
            raise
        latest = log.latest(self.rows)
        self.steps_table.value = steps_html(latest, self.metrics, "loss" in self.panels, self._scope)
        self._draw_tabs()
        self._draw_completions()
        self.redraws += 1

    def _draw_panel(self, name: str) -> None:
        self.images[name].value = draw_panel(
            self.panels[name], name, self.series, smooth=self.ema_toggle.value, log_y=self.log_toggle.value,
            na_reason=self.history.step_log.na_reason, logged=name in self.metrics,
        )  # fmt: skip

    def _draw_tabs(self) -> None:
        """The tab on show (hidden ones are drawn when shown)."""
        if self.tables.selected_index == 1:
            self.ops_table.value = ops_html(self.history.tail(self.rows))
        elif self.tables.selected_index == 2:
            self.rl_table.value = rl_html(self.history.step_log.latest(self.rows))

    def _draw_completions(self, force: bool = False) -> None:
        """The accordion's title always; its table while open, when the latest step's completions changed."""
        rows = self.history.latest_completions()
        if rows is self._completions_seen and not force or not rows:
            return
        self._completions_seen = rows
        self.completions.set_title(0, f"completions: step {rows[0]['step']} ({len(rows)})")
        if self.completions.selected_index == 0:
            self.completions_table.value = completions_html(rows)
