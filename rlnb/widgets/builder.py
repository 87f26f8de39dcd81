"""``OptimizerBuilder``: a form over ``AdamParams`` / ``MuonParams`` that cannot produce a bad config.

The params object is the one source of truth, validated by the same rules (errors name the field,
and the field itself turns red), previewed as the exact JSON body, with a learning-rate schedule and
its plot. Presets teach: each says what a run with it does on the first-letter task (``rlnb.widgets.presets``).
Folded (the default), the form is one line that says what will be sent: optimizer, rate(s), schedule,
preset — so that a schedule set in another cell is never a surprise, and the form fits a laptop screen.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any

import ipywidgets as W

from rlnb import wire
from rlnb._options import check_int
from rlnb.errors import InvalidParams
from rlnb.params import ADAM_FIELDS, MUON_FIELDS, AdamParams, MuonParams, OptimizerParams
from rlnb.schedule import Schedule
from rlnb.widgets.controls import FIELD, STYLE, WIDE, LearningRate, close_tree, controls, grid, mark, values
from rlnb.widgets.describe import check_rates, schedule_png, summary
from rlnb.widgets.finder import LRFinderControls
from rlnb.widgets.presets import DEFAULT_PRESET, LESSONS, PRESETS, differs, preset_values, unconverted

__all__ = ["DEFAULT_PRESET", "LESSONS", "LR_RANGES", "PRESETS", "OptimizerBuilder"]

LR_RANGES = {"adam": (-6, 2), "muon": (-4, 2), "muon.adam": (-6, 2)}
"""Slider ranges (log10) for the learning rate; the text box takes any value (the slider then sits at an end)."""


class OptimizerBuilder:
    """Build ``AdamParams`` / ``MuonParams`` with controls.

    ``.params`` is the validated config (``InvalidParams`` if a field is out of range), ``.errors`` the
    current problems (the fields themselves turn red), the JSON preview (collapsed) equals
    ``.params.request_body()``, ``.schedule(step)`` is the scheduled learning rate and
    ``.params_at(step)`` the config to send at that step. ``.modified``: a field sent differs from the preset.
    The form is folded under its one-line summary (``.summary``) unless ``expanded``.
    """

    def __init__(
        self,
        optimizer: str = "adam",
        preset: str = DEFAULT_PRESET,
        total_steps: int = 100,
        model: Any = "tiny",
        *,
        expanded: bool = False,
    ):
        wire.optimizer_kind(optimizer)
        total_steps = check_int("total_steps", total_steps, 1)  # 2.5 was taken as 2, "10" as 10, NaN a TraitError
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {preset!r}")
        self.adam = controls(ADAM_FIELDS, LR_RANGES["adam"])
        self.muon = controls(MUON_FIELDS, LR_RANGES["muon"])
        self.muon_adam = controls(ADAM_FIELDS, LR_RANGES["muon.adam"])
        self.tabs = W.Tab(
            children=[
                grid(self.adam),
                W.VBox(
                    [
                        grid(self.muon),
                        W.HTML("<b>adam</b> — for embeddings, output head, norms, biases"),
                        grid(self.muon_adam),
                    ]
                ),
            ],
            titles=("Adam", "Muon"),
        )
        self.tabs.selected_index = 0 if optimizer == "adam" else 1
        self.locked: str | None = None
        """The only optimizer kind allowed (a session's), once ``lock`` is called."""
        self.preset = W.Dropdown(options=list(PRESETS), description="preset", layout=W.Layout(width="290px"))
        self.lesson = W.HTML()
        self.sched_kind = W.Dropdown(
            options=["constant", "linear", "cosine"], description="schedule", style=WIDE, layout=FIELD
        )
        self.warmup = W.IntText(value=0, description="warmup steps", style=WIDE, layout=FIELD)
        self.total = W.IntText(value=total_steps, description="total steps", style=WIDE, layout=FIELD)
        self.min_ratio = W.FloatText(value=0.1, description="min lr ratio", style=WIDE, layout=FIELD)
        self.preview = W.HTML()
        self.json = W.Accordion(children=[self.preview], titles=("request body (JSON)",), selected_index=None)
        self.message = W.HTML()
        self.message.add_class("rlnb-message")
        self.schedule_plot = W.Image(format="png", layout=W.Layout(width="300px"))
        schedule = W.GridBox(
            [self.sched_kind, self.warmup, self.total, self.min_ratio],
            layout=W.Layout(grid_template_columns="repeat(2, 300px)", grid_gap="2px 8px", align_content="center"),
        )
        self.lr_finder = LRFinderControls(self, model)  # "Find LR", and Muon's lr units for ``model``'s shapes
        form = W.VBox(
            [
                W.HBox([self.preset, self.lesson], layout=W.Layout(align_items="center")),
                self.tabs,
                self.message,
                W.HBox([schedule, self.schedule_plot], layout=W.Layout(flex_flow="row wrap")),
                self.lr_finder.widget,
                self.json,
            ]
        )
        self.fold = W.Accordion(children=[form], titles=("optimizer",), selected_index=0 if expanded else None)
        """The form under its one-line summary; ``selected_index`` None = folded."""
        self.widget = W.VBox([W.HTML(STYLE), self.fold])
        self.widget.add_class("rlnb-builder")
        self._callbacks: list[Callable[[OptimizerBuilder], None]] = []
        self._params: OptimizerParams | None = None
        self.errors: list[str] = []
        self._quiet = False
        self._applied: str = preset
        self.modified = False
        """True while a control of the selected tab (what will be sent) differs from the preset last applied."""
        self.apply_preset(preset)
        for group in (self.adam, self.muon, self.muon_adam):
            for c in group.values():
                c.observe(self._changed) if isinstance(c, LearningRate) else c.observe(self._changed, names="value")
        for c in (self.sched_kind, self.warmup, self.total, self.min_ratio):
            c.observe(self._changed, names="value")
        self.tabs.observe(self._changed, names="selected_index")
        self.preset.observe(self._picked, names="value")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    # -- state -----------------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """The selected tab's optimizer kind, ``"adam"`` or ``"muon"`` (settable)."""
        return "adam" if self.tabs.selected_index == 0 else "muon"

    @kind.setter
    def kind(self, value: str) -> None:
        """``ValueError`` naming ``kind`` unless "adam" or "muon": anything else selected the Muon tab."""
        self.tabs.selected_index = 0 if wire.optimizer_kind(value, "kind") == "adam" else 1

    @property
    def valid(self) -> bool:
        """True when every field passes the params' own checks (``errors`` is empty)."""
        return not self.errors

    @property
    def summary(self) -> str:
        """The line shown while folded: optimizer, rate(s), schedule, preset (and the problems first)."""
        return str(self.fold.get_title(0))

    @property
    def params(self) -> OptimizerParams:
        """The config as built now; raises ``InvalidParams`` naming every field that is out of range
        (and ``ValueError`` on the tab that a locked builder does not allow)."""
        if self._params is None:
            self._params = self._build()
        return self._params

    def on_change(self, callback: Callable[[OptimizerBuilder], None]) -> Callable[[], None]:
        """Call ``callback(builder)`` after every change of a control; returns a function that unsubscribes."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback)

    def lock(self, kind: str) -> None:
        """Allow only ``kind`` (a session's optimizer, fixed when the session was created): the other
        tab's controls are disabled, and while it is selected the builder is invalid and says why."""
        wire.optimizer_kind(kind, "kind")
        self.locked = kind
        # a builder locked before (to another panel's session) is unlocked first: else every control stayed off
        for name, groups, index in (("adam", (self.adam,), 0), ("muon", (self.muon, self.muon_adam), 1)):
            for group in groups:
                for c in group.values():
                    c.disabled = name != kind
            self.tabs.set_title(index, name.capitalize() + ("" if name == kind else " (locked)"))
        self.kind = kind
        self._changed()

    def apply_preset(self, name: str) -> None:
        """Fill every control from ``PRESETS[name]``, Muon's rate in the form's units (a session's: the preset's
        0.05 was loaded as is into a match_adam session); one update of the preview at the end. ``ValueError`` naming
        the presets for any other name (the dropdown's "<preset> (modified)" label among them)."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
        preset = preset_values(name, self.lr_finder.from_original)
        self._quiet = True
        try:
            for group, key in ((self.adam, "adam"), (self.muon, "muon"), (self.muon_adam, "muon.adam")):
                for field, v in preset[key].items():
                    group[field].value = v
            self.preset.options = list(PRESETS)
            self.preset.value = name
        finally:
            self._quiet = False
        self._applied, self.modified = name, False
        self._changed()

    def get_schedule(self) -> Schedule:
        """The learning-rate schedule the form describes (kind, warmup, total steps, minimum ratio)."""
        return Schedule(
            self.sched_kind.value, int(self.warmup.value), int(self.total.value), float(self.min_ratio.value)
        )

    def schedule(self, step: int) -> float:
        """The learning rate to use at ``step`` (counting from 0): base rate × schedule."""
        return self.get_schedule()(step, float(self.params.learning_rate or 0.0))

    def params_at(self, step: int) -> OptimizerParams:
        """``.params`` with the scheduled learning rate(s) for ``step`` (Muon: its ``adam`` too)."""
        return self.params.scaled(self.get_schedule().multiplier(step))

    # -- reactions -------------------------------------------------------------------------------

    def _build(self) -> OptimizerParams:
        if self.locked is not None and self.kind != self.locked:
            raise ValueError(
                f"this session's optimizer is {self.locked}: {self.kind.capitalize()} params cannot be sent "
                f"(the optimizer is fixed when the session is created); pick the {self.locked.capitalize()} tab"
            )
        if self.kind == "adam":
            return AdamParams(**values(self.adam))
        errors = []  # check both parts, so that every bad field is named (and marked) at once
        for prefix, check in (
            ("", lambda: MuonParams(**values(self.muon))),
            ("adam.", lambda: AdamParams(**values(self.muon_adam))),
        ):
            try:
                check()
            except InvalidParams as exc:
                errors += [(prefix + field, value, allowed) for field, value, allowed in exc.errors]
        if errors:
            raise InvalidParams("MuonParams", errors)
        return MuonParams(**values(self.muon), adam=AdamParams(**values(self.muon_adam)))

    def _picked(self, change: dict[str, Any]) -> None:
        if not self._quiet and change["new"] in PRESETS:
            self.apply_preset(change["new"])

    def _follow_preset(self) -> None:
        """``modified`` and the dropdown ("<preset> (modified)") say whether what will be sent, the selected tab's
        fields, differs from the preset (in the form's units): an edit of the other tab marked the config sent too."""
        sent = ((self.adam, "adam"),) if self.kind == "adam" else ((self.muon, "muon"), (self.muon_adam, "muon.adam"))
        modified = differs(sent, preset_values(self._applied, self.lr_finder.from_original))
        if modified != self.modified:
            self.modified = modified
            label = f"{self._applied} (modified)"
            self._quiet = True
            try:
                self.preset.options = [label, *PRESETS] if modified else list(PRESETS)
                self.preset.value = label if modified else self._applied
            finally:
                self._quiet = False

    def _changed(self, change: Any = None) -> None:
        if self._quiet:
            return
        self._follow_preset()
        self._params = None
        self.errors, bad = [], set()
        try:
            body = self.params.request_body()
        except InvalidParams as exc:
            self.errors += str(exc).splitlines()
            bad |= {field for field, _, _ in exc.errors}
            body = None
        except ValueError as exc:  # the tab a locked builder does not allow
            self.errors.append(str(exc))
            body = None
        try:
            schedule = self.get_schedule()
            if body is not None:  # a step whose rate is 0 in float stopped the run there, from a valid form
                check_rates(schedule, self.params)
        except ValueError as exc:
            self.errors.append(str(exc))
            match = re.match(r"Schedule\.(\w+)", str(exc))
            bad.add("schedule." + (match.group(1) if match else "kind"))
            schedule = None
        self._mark(bad)
        if self.errors:
            self.message.value = "".join(f"<div style='color:#b00020'>✗ {e}</div>" for e in self.errors)
        else:
            self.message.value = "<span style='color:#1b5e20'>✓ valid</span>"
        if body is None:
            self.preview.value = "<i>not sendable until the fields above are fixed</i>"
        else:
            self.preview.value = f"<pre style='margin:0'>{json.dumps(body, indent=2)}</pre>"
        if schedule is not None and body is not None:
            try:
                self.schedule_plot.value = schedule_png(schedule, float(self.params.learning_rate or 0.0))
                self.schedule_plot.layout.display = None
            except ValueError:  # matplotlib cannot tick rates near the largest float (1e308): no plot, all else
                self.schedule_plot.layout.display = "none"  # (summary, Find LR, the panel's buttons) follows
        params = self.params if body is not None else None
        note = unconverted(self._applied, self.kind, self.muon["learning_rate"].value, self.lr_finder.unconverted)
        lesson = html.escape(LESSONS[self._applied].text(self.kind) + note, quote=False)  # this tab's: values differ
        self.lesson.value = f"<span style='color:#555'>{lesson}</span>"
        self.fold.set_title(0, summary(self.kind, params, schedule, str(self.preset.value) + note, len(self.errors)))
        self.lr_finder.sync()
        for cb in list(self._callbacks):
            cb(self)

    def _mark(self, bad: set[str]) -> None:
        """Turn the refused fields red, and only those."""
        aux = {"adam." + name: c for name, c in self.muon_adam.items()}
        fields = dict(self.adam) if self.kind == "adam" else {**self.muon, **aux}
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

    def close(self) -> None:
        """Close every control of the builder (the front end removes them); a Find LR in flight stops after
        its step, instead of training on, unseen."""
        self.lr_finder.stop()
        close_tree(self.widget)
