"""``OptimizerBuilder``: a form over ``AdamParams`` / ``MuonParams`` that cannot produce a bad config.

The params object is the one source of truth, validated by the same rules (errors name the field,
and the field itself turns red), previewed as the exact JSON body, with a learning-rate schedule and
its plot. Presets teach: each says what a run with it does on the first-letter task (``rlnb.widgets.presets``).
The controls and their layout are ``rlnb.widgets.form``'s; the tab and preset, ``rlnb.widgets.selection``'s.
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Callable
from typing import Any

from rlnb import wire
from rlnb._input.checks import check_int
from rlnb._input.shown import shown
from rlnb.errors import SHOWN_VALUE, InvalidParams, describe
from rlnb.params import PARAMS, AdamParams, MuonParams, OptimizerParams
from rlnb.params.schedule import MAX_STEPS, Schedule
from rlnb.widgets.controls import LearningRate, close_tree, typed, values
from rlnb.widgets.describe import ORANGE, check_rates, schedule_png, summary
from rlnb.widgets.finder import LRFinderControls
from rlnb.widgets.form import LR_RANGES, BuilderForm
from rlnb.widgets.presets import DEFAULT_PRESET, LESSONS, PRESETS, elsewhere, unconverted, unmeasured
from rlnb.widgets.selection import Selection

__all__ = ["DEFAULT_PRESET", "LESSONS", "LR_RANGES", "PRESETS", "OptimizerBuilder"]


class OptimizerBuilder(BuilderForm):
    """Build ``AdamParams`` / ``MuonParams`` with controls.

    ``.params`` is the validated config (``InvalidParams`` if a field is out of range), ``.errors`` the
    current problems (the fields themselves turn red), the JSON preview (collapsed) equals
    ``.params.request_body()``, ``.schedule(step)`` is the scheduled learning rate and
    ``.params_at(step)`` the config to send at that step. ``.modified``: a field sent differs from the preset.
    The form is folded under its one-line summary (``.summary``) unless ``expanded``.
    """

    def __init__(
        self,
        optimizer: str = wire.ADAM,
        preset: str = DEFAULT_PRESET,
        total_steps: int = 100,
        model: Any = "tiny",
        *,
        expanded: bool = False,
    ):
        wire.optimizer_kind(optimizer)
        if not isinstance(expanded, bool):  # "no" opened the form: any truthy value did
            raise TypeError(f"expanded must be True or False, got {expanded!r}")
        # not 2.5 taken as 2, "10" as 10, NaN a TraitError; nor, past MAX_STEPS, a form that opens marked invalid
        total_steps = check_int("total_steps", total_steps, 1, MAX_STEPS, why="the most steps a run takes")
        if not isinstance(preset, str) or preset not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {preset!r}")
        self.lr_finder = LRFinderControls(self, model)  # "Find LR", and Muon's lr units for ``model``'s shapes
        super().__init__(optimizer, total_steps, expanded, self.lr_finder.widget)
        self._callbacks: list[Callable[[OptimizerBuilder], None]] = []
        self._params: OptimizerParams | None = None
        self.errors: list[str] = []
        self.judged: Schedule | None = None
        """The last valid schedule, which the lesson's mark judges: an invalid one's form kept the lesson unmarked."""
        self.closed = False
        """Whether ``close`` was called: a RunPanel given the builder then refuses to train (its form is gone)."""
        self.panel: Any = None
        """The open RunPanel that holds this builder now (the last given it): its session, task and turns are
        Find LR's (``rlnb.widgets.turns.take``); None on its own."""
        self.selection = Selection(self, self._changed, self.lr_finder.from_original)
        """The tab and the preset: which is applied, and whether what will be sent differs from it."""
        self.apply_preset(preset)
        for group in (self.adam, self.muon, self.muon_adam):
            for c in group.values():
                c.observe(self._changed) if isinstance(c, LearningRate) else c.observe(self._changed, names="value")
        for c in (self.sched_kind, self.warmup, self.total, self.min_ratio):
            c.observe(self._changed, names="value")

    # -- state -----------------------------------------------------------------------------------

    @property
    def kind(self) -> wire.OptimizerKind:
        """The selected tab's optimizer kind, ``"adam"`` or ``"muon"`` (settable; ``ValueError`` naming ``kind``
        unless one of them: anything else selected the Muon tab)."""
        return self.selection.kind

    @kind.setter
    def kind(self, value: str) -> None:
        self.selection.kind = value

    @property
    def locked(self) -> str | None:
        """The only optimizer kind allowed (a session's), once ``lock`` is called."""
        return self.selection.locked

    @property
    def modified(self) -> bool:
        """True while a control of the selected tab (what will be sent) differs from the preset last applied."""
        return self.selection.modified

    @property
    def valid(self) -> bool:
        """True when every field passes the params' own checks (``errors`` is empty)."""
        return not self.errors

    @property
    def params(self) -> OptimizerParams:
        """The config as built now; raises ``InvalidParams`` naming every field that is out of range
        (and ``ValueError`` on the tab that a locked builder does not allow, or naming a field its panel's session
        refuses: ``_fits``)."""
        if self._params is None:
            self._params = self._build()
        return self._params

    def on_change(self, callback: Callable[[OptimizerBuilder], None]) -> Callable[[], None]:
        """Call ``callback(builder)`` after every change of a control; returns a function that unsubscribes. One that
        raises is a ``RuntimeWarning``: raised, it would skip the callbacks after it (a RunPanel's, whose Run would
        stay on)."""
        if not callable(callback):  # taken, 5 would make every edit raise "'int' object is not callable"
            raise TypeError(f"on_change: callback must be a function callback(builder), got {callback!r}"[:300])
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback)

    def lock(self, kind: str | None) -> None:
        """Allow only ``kind`` (a session's optimizer, fixed when the session was created): the other
        tab's controls are disabled, and while it is selected the builder is invalid and says why. ``None``
        allows both again."""
        self.selection.lock(kind)

    def apply_preset(self, name: str) -> None:
        """Fill every control from ``PRESETS[name]``, Muon's rate in the form's units (a session's: the preset's
        0.05 was loaded as is into a match_adam session); one update of the preview at the end. ``ValueError`` naming
        the presets for any other name (the dropdown's "<preset> (modified)" label among them)."""
        self.selection.apply(name)

    def schedule(self, step: int) -> float:
        """The learning rate to use at ``step`` (counting from 0): base rate × schedule."""
        return self.get_schedule()(step, float(self.params.learning_rate or 0.0))

    def params_at(self, step: int) -> OptimizerParams:
        """``.params`` with the scheduled learning rate(s) for ``step`` (Muon: its ``adam`` too)."""
        return self.params.scaled(self.get_schedule().multiplier(step))

    def close(self) -> None:
        """Close every control of the builder (the front end removes them); a Find LR in flight stops after
        its step, instead of training on, unseen; a RunPanel given it turns its Step and Run off, saying why."""
        self.lr_finder.stop()
        close_tree(self.widget)
        self.closed = True
        self._tell()

    # -- reactions -------------------------------------------------------------------------------

    def _build(self) -> OptimizerParams:
        if self.locked is not None and self.kind != self.locked:
            raise ValueError(
                f"this session's optimizer is {self.locked}: {self.kind.capitalize()} params cannot be sent "
                f"(the optimizer is fixed when the session is created); pick the {self.locked.capitalize()} tab"
            )
        parts = [("", AdamParams, self.adam)] if self.kind == wire.ADAM else [
            ("", MuonParams, self.muon), ("adam.", AdamParams, self.muon_adam)]  # fmt: skip
        errors = []  # check both parts, so that every bad field is named (and marked) at once
        for prefix, made, group in parts:
            try:
                made(**values(group))
            except InvalidParams as exc:  # a value as typed ('1e400'), not as read (inf, a number nobody typed)
                errors += [(prefix + field, as_typed(group.get(field), value), allowed)
                           for field, value, allowed in exc.errors]  # fmt: skip
        if errors:
            raise InvalidParams(parts[0][1].__name__, errors)
        if self.kind == wire.ADAM:
            return self._fits(AdamParams(**values(self.adam)))
        return self._fits(MuonParams(**values(self.muon), adam=AdamParams(**values(self.muon_adam))))

    def _fits(self, params: OptimizerParams) -> OptimizerParams:
        """``params``, or the ``ValueError`` naming the field that the session of the panel holding this builder
        refuses (``Session.check_params``: a local engine's limits, an eps that is 0 in its float32): said "✓ valid",
        a click sampled, the optim-step alone was refused, and its kept gradients went into the next Step."""
        if self.panel is not None:
            try:
                self.panel.session.check_params(params)
            except ValueError as exc:  # the engine speaks the wire's names; the form, the params'
                said = str(exc)
                for kind, field in wire.OPTIMIZER_PARAMS_FIELD.items():
                    said = said.replace(f"{field}.", f"{PARAMS[kind].__name__}.")
                raise ValueError(said) from exc
        return params

    def _changed(self, change: Any = None) -> None:
        if self.selection.quiet:
            return
        self.selection.follow()
        self._params = None
        self.errors, bad = [], set()
        try:
            body = self.params.request_body()
        except InvalidParams as exc:
            self.errors += str(exc).splitlines()
            bad |= {field for field, _, _ in exc.errors}
            body = None
        except ValueError as exc:  # the tab a locked builder does not allow, or what its session refuses
            self.errors.append(str(exc))
            bad |= set(re.findall(r"^(?:Adam|Muon)Params\.([\w.]+)", str(exc)))  # the session's words name it so
            body = None
        try:
            schedule = self.judged = self.get_schedule()
            if body is not None:  # a step whose rate is 0 in float stopped the run there, from a valid form
                check_rates(schedule, self.params)
        except ValueError as exc:
            self.errors.append(str(exc))
            match = re.match(r"Schedule\.(\w+)", str(exc))
            bad.add("schedule." + (match.group(1) if match else "kind"))
            schedule = None
        self.mark_refused(self.kind, bad)
        self.show(self.errors, body, self.selection.take_notice())
        shown = schedule is not None and body is not None  # an invalid form's plot kept the last valid curve
        if shown:
            try:
                self.schedule_plot.value = schedule_png(schedule, float(self.params.learning_rate or 0.0))
            except ValueError:  # matplotlib cannot tick rates near the largest float (1e308): no plot, all else
                shown = False  # (summary, Find LR, the panel's buttons) follows
        self.schedule_plot.layout.display = None if shown else "none"
        params = self.params if body is not None else None
        applied = self.selection.applied
        note = unconverted(applied, self.kind, self.muon["learning_rate"].value, self.lr_finder.unconverted)
        sent = self.lr_finder.from_original(PRESETS[applied]["muon"]["learning_rate"])  # in the form's units
        where = elsewhere(self.panel, self.lr_finder.model)  # the panel's task and model, else the builder's model
        said, why = LESSONS[applied].text(self.kind, sent) + note, unmeasured(self.judged, self.modified, where)
        lesson = html.escape(said + (f" — {why}" if why else ""), quote=False)  # this tab's: values differ
        self.lesson.value = f"<span style='color:#555'>{lesson}</span>"
        why = unmeasured(self.judged, False, where)  # "(modified)" is in the label already
        preset = str(self.preset.value) + note + (f" — lesson {why}" if why else "")
        self.fold.set_title(0, summary(self.kind, params, schedule, preset, len(self.errors)))
        self.lr_finder.sync()
        self._tell()

    def _tell(self) -> None:
        """Call the ``on_change`` callbacks. One that raises is also said in the message line (until the next redraw):
        after an edit in the browser, the warning reached only JupyterLab's log console, under a "✓ valid" form."""
        for cb in list(self._callbacks):
            try:
                cb(self)
            except Exception as exc:  # noqa: BLE001 - said, and the other callbacks (a panel's) still follow
                warnings.warn(f"OptimizerBuilder.on_change: the callback {cb!r} raised {describe(exc)}"[:500],
                              RuntimeWarning, stacklevel=2)  # fmt: skip
                name = getattr(cb, "__name__", None) or repr(cb)
                said = html.escape(f"the on_change callback {name} raised {describe(exc)}"[:500], quote=False)
                self.message.value += f"<div style='color:{ORANGE}'>⚠ {said}</div>"


def as_typed(control: Any, value: Any) -> Any:
    """``value`` as typed in ``control`` (a box, or a rate's), for a refusal to quote, where the refusal would write
    it otherwise (``inf`` for "1e400"); else ``value`` ("2.5" is said 2.5, as typed)."""
    text = typed(control.text if isinstance(control, LearningRate) else control)
    return value if text is None or text == shown(value, SHOWN_VALUE) else text


def check_builder(builder: object) -> None:
    """A RunPanel's ``builder``, checked when the panel is made: None, or an ``OptimizerBuilder`` still open."""
    if builder is not None and not isinstance(builder, OptimizerBuilder):  # "'AdamParams' ... has no 'lock'"
        raise TypeError(f"builder must be an OptimizerBuilder or None, got {type(builder).__name__}: {builder!r}")
    if isinstance(builder, OptimizerBuilder) and builder.closed:  # its form is off the page: nothing to see or edit
        raise ValueError("builder is closed: pass a new OptimizerBuilder, or none (the panel makes its own)")
