"""The optimizer builder's controls and their layout: what the form shows, not what it means.

Folded (the default), the form is one line that says what will be sent: optimizer, rate(s), schedule,
preset — so that a schedule set in another cell is never a surprise, and the form fits a laptop screen.
``rlnb.widgets.builder`` gives the controls their meaning; ``rlnb.widgets.selection`` keeps the tab and preset.
"""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as W

from rlnb import wire
from rlnb.params import ADAM_FIELDS, MUON_ADAM_FIELDS, MUON_FIELDS
from rlnb.params.schedule import Schedule
from rlnb.widgets.controls import (
    IN_ROW,
    STYLE,
    TEXT,
    WIDE,
    CountBox,
    NumberBox,
    controls,
    field,
    grid,
    mark,
    opener,
    pairs,
    quote_typed,
    whole,
)
from rlnb.widgets.describe import ORANGE
from rlnb.widgets.presets import AUX, PRESETS

LR_RANGES = {wire.ADAM: (-6, 2), wire.MUON: (-4, 2), AUX: (-6, 2)}
"""Slider ranges (log10) for the learning rate; the text box takes any value (the slider then sits at an end)."""
RED, GREEN = "#b00020", "#1b5e20"


class BuilderForm:
    """Every control of the builder, laid out: the preset and its lesson, the Adam / Muon tabs, the message line,
    the schedule and its plot, ``finder`` (the Find LR controls' widget), the JSON preview; all under ``fold``."""

    def __init__(self, optimizer: str, total_steps: int, expanded: bool, finder: W.Widget):
        self.adam = controls(ADAM_FIELDS, LR_RANGES[wire.ADAM])
        self.muon = controls(MUON_FIELDS, LR_RANGES[wire.MUON])
        self.muon_adam = controls(MUON_ADAM_FIELDS, LR_RANGES[AUX])  # no clip: Muon's is global
        muon_note = W.HTML("<b>adam</b> — for embeddings, output head, norms, biases (clipped by the clip above)")
        panes = {wire.ADAM: grid(self.adam), wire.MUON: W.VBox([grid(self.muon), muon_note, grid(self.muon_adam)])}
        kinds = wire.OPTIMIZERS  # the selection reads a tab's kind by its index there
        self.tabs = W.Tab(children=[panes[k] for k in kinds], titles=tuple(k.capitalize() for k in kinds))
        self.tabs.selected_index = kinds.index(wire.optimizer_kind(optimizer))
        self.preset = W.Dropdown(options=list(PRESETS), description="preset", layout=field())
        self.lesson = W.HTML(layout=W.Layout(flex="1 1 200px"))
        self.lesson.add_class(TEXT)
        self.sched_kind = W.Dropdown(
            options=["constant", "linear", "cosine"], description="schedule", style=WIDE, layout=field()
        )
        self.warmup = CountBox(value=0, description="warmup steps", style=WIDE, layout=field())
        self.total = CountBox(value=total_steps, description="total steps", style=WIDE, layout=field())
        self.min_ratio = NumberBox(value=0.1, description="min lr ratio", style=WIDE, layout=field())
        self.preview = W.HTML()
        # the body at the base rate, which no step of a warmup or decay sends: said, not read as the wire's
        body = "request body (JSON) at the base rate: the schedule scales its learning_rate"
        self.json = W.Accordion(children=[self.preview], titles=(body,), selected_index=None)
        self.json_opener, json_row = opener(self.json, "code", "show or hide the request body (JSON)")
        self.message = W.HTML()
        self.notice = ""
        """The notice on the message line now, as shown (``show``)."""
        self.message.add_class("rlnb-message")
        self.message.add_class(TEXT)
        self.schedule_plot = W.Image(format="png", layout=W.Layout(width="300px", max_width=IN_ROW))
        schedule = pairs([self.sched_kind, self.warmup, self.total, self.min_ratio], align_content="center")
        form = W.VBox(
            [
                # the lesson under the preset in a narrow column (squeezed beside it, a word to a line)
                W.HBox([self.preset, self.lesson], layout=W.Layout(align_items="center", flex_flow="row wrap")),
                self.tabs,
                self.message,
                W.HBox([schedule, self.schedule_plot], layout=W.Layout(flex_flow="row wrap")),
                finder,
                json_row,
            ]
        )
        self.fold = W.Accordion(children=[form], titles=("optimizer",), selected_index=0 if expanded else None)
        """The form under its one-line summary; ``selected_index`` None = folded."""
        self.opener, beside = opener(self.fold, "sliders", "open or fold the optimizer form")
        """Opens and folds the form like a click on its summary, from the keyboard too: else the form of a panel would
        be out of a keyboard's reach."""
        self.widget = W.VBox([W.HTML(STYLE), beside])
        self.widget.add_class("rlnb-builder")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def summary(self) -> str:
        """The line shown while folded: optimizer, rate(s), schedule, preset (and the problems first)."""
        return str(self.fold.get_title(0))

    def get_schedule(self) -> Schedule:
        """The learning-rate schedule the form describes (kind, warmup, total steps, minimum ratio)."""
        try:
            return Schedule(
                self.sched_kind.value, whole(self.warmup.value), whole(self.total.value), float(self.min_ratio.value)
            )
        except ValueError as exc:  # a value as typed ('1e400'), not as read (inf, a number nobody typed)
            boxes = {"warmup_steps": self.warmup, "total_steps": self.total, "min_lr_ratio": self.min_ratio}
            raise ValueError(quote_typed(str(exc), "Schedule", boxes)) from None

    def show(self, errors: list[str], body: dict[str, Any] | None, notice: str = "") -> None:
        """The message line (``notice``: a control put back, and why; a note, not an error of the form) and the JSON
        preview."""
        self.notice = f"<div style='color:{ORANGE}'>⚠ {html.escape(notice, quote=False)}</div>" if notice else ""
        said = self.notice
        if errors:
            said += "".join(f"<div style='color:{RED}'>✗ {html.escape(e, quote=False)}</div>" for e in errors)
        else:
            said += f"<span style='color:{GREEN}'>✓ valid</span>"
        self.message.value = said
        if body is None:
            self.preview.value = "<i>not sendable until the fields above are fixed</i>"
        else:
            self.preview.value = f"<pre style='margin:0'>{json.dumps(body, indent=2)}</pre>"

    def clear_notice(self) -> None:
        """Take the notice off the message line (a run's end: "the run goes on" was left after it had ended)."""
        if self.notice:
            self.message.value = self.message.value.replace(self.notice, "", 1)
            self.notice = ""

    def mark_refused(self, kind: str, bad: set[str]) -> None:
        """Turn the refused fields (of the ``kind`` tab, and the schedule's) red, and only those."""
        aux = {"adam." + name: c for name, c in self.muon_adam.items()}
        fields = dict(self.adam) if kind == wire.ADAM else {**self.muon, **aux}
        for group in (self.adam, self.muon, self.muon_adam):
            for c in group.values():
                mark(c, False)
        schedule = {"warmup_steps": self.warmup, "total_steps": self.total, "min_lr_ratio": self.min_ratio}
        for name, c in schedule.items():
            mark(c, "schedule." + name in bad)
        mark(self.sched_kind, "schedule.kind" in bad)
        for name in bad:
            if name in fields:
                mark(fields[name], True)
