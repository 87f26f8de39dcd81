"""Muon's lr units beside Find LR: the "original" ↔ "match_adam" dropdown, which converts the form's Muon rate
for the model's matrix shapes; on a session the units are the session's (fixed when it was created) and the
shapes its own model's. ``rlnb.widgets.suggestion.Suggestion`` adds a range test's words and Apply to these
controls, and ``rlnb.widgets.finder.LRFinderControls`` the range test itself.
"""

from __future__ import annotations

import html
from typing import Any, Protocol

import ipywidgets as W

from rlnb import wire
from rlnb.params import OptimizerParams
from rlnb.session import Session
from rlnb.widgets.controls import TEXT, WIDE, convert_units
from rlnb.widgets.form import RED

NO_MATRICES = "this model has no Muon matrices: Muon lr updates nothing"
"""The units line where the model routes every matrix to Adam: a Muon rate has nothing to convert."""


class Form(Protocol):
    """What the controls need of the builder they sit in (``rlnb.widgets.builder.OptimizerBuilder``)."""

    adam: dict[str, Any]
    muon: dict[str, Any]
    muon_adam: dict[str, Any]
    errors: list[str]

    @property
    def kind(self) -> wire.OptimizerKind: ...

    @property
    def valid(self) -> bool: ...

    @property
    def params(self) -> OptimizerParams: ...


def session_units(session: Session) -> str:
    """A Muon session's lr units, fixed when it was created ("original" unless its config names others)."""
    given = session.history.config.get("muon_scaling")
    return str(wire.SCALING_NAMES.get(str(given), given) or wire.MUON_ORIGINAL)


class MuonUnits:
    """The units dropdown (``scaling``) and the status line it shares with the range test (``status``):
    ``session`` (set by the RunPanel) fixes the units to its own; ``shapes`` are ``model``'s, then the session's."""

    def __init__(self, builder: Form, model: Any = "tiny"):
        from rlnb.sweep import muon_shapes

        self.builder, self.model = builder, model
        self.shapes: list[tuple[int, int]] | None = muon_shapes(model)
        self._session: Session | None = None
        self.scaling = W.Dropdown(options=list(wire.MUON_SCALING), description="Muon lr units", style=WIDE)
        self.status = W.HTML()
        self.status.add_class(TEXT)
        self._said = ""  # the status line's lasting message, shown again once the form is valid
        self._converting = False
        self._units: str | None = None  # a session's, which the units must stay (set in code, they converted the rate)
        self.scaling.observe(self._convert, names="value")

    def _say(self, text: str) -> None:
        self.status.value = text

    @property
    def session(self) -> Session | None:
        return self._session

    @session.setter
    def session(self, session: Session | None) -> None:
        """Take a session's Muon units (converting the form's rate to them, for its model's shapes) and
        lock the units: a rate in the other convention would mean another step size to this session."""
        from rlnb.sweep import muon_shapes

        self._session = session
        self._units = None  # the last session's units: set to this one's below, the form's rate converted to them
        if session is None or session.optimizer != wire.MUON:
            self.scaling.disabled, self._units = False, None
            return
        try:
            self.shapes = muon_shapes(session)
        except ValueError as exc:  # a remote session on a model whose shapes are not known here
            self.shapes = None
            self.scaling.tooltip = str(exc)
        units = session_units(session)
        if units != self.scaling.value and self.shapes is None:
            self._converting = True  # nothing to convert with: say so
            try:
                self.scaling.value = units
            finally:
                self._converting = False
            self._said = (
                f"<span style='color:{RED}'>✗ Muon's rate was not converted to {units}: "
                + html.escape(self.scaling.tooltip)
                + "</span>"
            )
            self._say(self._said)
        elif units != self.scaling.value:
            self.scaling.value = units  # converts the form's rate with the session's own shapes
        self.scaling.disabled, self._units = True, units
        self.scaling.tooltip = f"this session's units: {units} (fixed when the session was created)"

    @property
    def unconverted(self) -> str | None:
        """The form's Muon units while a rate in "original" units cannot be converted to them (shapes not known)."""
        return None if self.shapes is not None or self.scaling.value == wire.MUON_ORIGINAL else str(self.scaling.value)

    def from_original(self, lr: float) -> float:
        """A Muon rate in "original" units (a preset's, as its lesson was measured) in the form's units, for the
        shapes known here; as it is when they are not known (the status line says the rate was not converted)."""
        from rlnb.sweep import convert_muon_lr

        if self.scaling.value == wire.MUON_ORIGINAL or not self.shapes:  # [] (no Muon matrix): nothing to convert
            return lr
        return convert_muon_lr(lr, wire.MUON_ORIGINAL, self.scaling.value, self.shapes)

    def _convert(self, change: dict[str, Any]) -> None:
        if self._converting:
            return
        lr = self.builder.muon["learning_rate"]
        if self.shapes is None or change["new"] is None or self._units not in (None, change["new"]):
            self._converting = True  # None (no units) raised from this observer, and broke every preset picked after
            try:
                self.scaling.value = change["old"]
            finally:
                self._converting = False
            why = self.scaling.tooltip if change["new"] is not None else "Muon lr units: 'original' or 'match_adam'"
            self._say(f"<span style='color:{RED}'>✗ {html.escape(why)}</span>")
            return
        if not self.shapes:  # the rate reaches no matrix: a factor of 1
            self._said = f"{NO_MATRICES}, in either units"
            self._say(self._said)
            return
        said = convert_units(lr, change["old"], change["new"], self.shapes)
        if said:
            self._say(f"<span style='color:{RED}'>{html.escape(said)}</span>")
