"""Which optimizer tab and which preset the builder's form holds: the state its summary and lesson follow.

A preset fills every control, Muon's rate in the form's units (a match_adam session would read a preset's 0.05 as
another step size); an edit of the selected tab marks it "<preset> (modified)". A tab or preset set to none in
code is put back, and the message line says why: else the builder would read no tab as Muon and keep a blank preset's
label.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlnb import wire
from rlnb.widgets.form import BuilderForm
from rlnb.widgets.presets import AUX, PRESETS, differs, preset_values


class Selection:
    """The tab (``kind``), the preset last applied (``applied``) and whether what will be sent differs from it
    (``modified``) of ``form``; ``changed()`` redraws the builder, ``muon_rate`` gives a preset's Muon rate in
    the form's units (``LRFinderControls.from_original``)."""

    def __init__(self, form: BuilderForm, changed: Callable[[], None], muon_rate: Callable[[float], float]):
        self.form, self.changed, self.muon_rate = form, changed, muon_rate
        self.locked: str | None = None
        self.applied = ""
        self.modified = False
        self.quiet = False
        """True while the form's controls are set from here: the builder waits for one redraw at the end."""
        self.notice = ""
        """Why a control set in code was put back, shown once in the message line (``take_notice``)."""
        form.tabs.observe(self._tab, names="selected_index")
        form.preset.observe(self._picked, names="value")

    @property
    def kind(self) -> wire.OptimizerKind:
        """The selected tab's optimizer kind (no tab, set in code, is put back at once: ``_tab``)."""
        return wire.OPTIMIZERS[self.form.tabs.selected_index or 0]

    @kind.setter
    def kind(self, value: str) -> None:
        self.form.tabs.selected_index = wire.OPTIMIZERS.index(wire.optimizer_kind(value, "kind"))

    def lock(self, kind: str | None) -> None:
        """Allow only ``kind``: the other tab's controls are disabled (a builder locked before to another panel's
        session is unlocked first: else every control would stay off), and ``kind``'s tab is selected. ``None``
        allows both again (a builder whose panel closed, not locked to the dead session)."""
        if kind is not None:
            wire.optimizer_kind(kind, "kind")
        self.locked = kind
        groups = {wire.ADAM: (self.form.adam,), wire.MUON: (self.form.muon, self.form.muon_adam)}
        for index, name in enumerate(wire.OPTIMIZERS):
            for group in groups[name]:
                for c in group.values():
                    c.disabled = kind is not None and name != kind
            self.form.tabs.set_title(index, name.capitalize() + ("" if kind in (None, name) else " (locked)"))
        if kind is not None:
            self.kind = kind
        self.changed()

    def apply(self, name: str) -> None:
        """Fill every control from ``PRESETS[name]``; one redraw at the end. ``ValueError`` naming the presets
        for any other name (the dropdown's "<preset> (modified)" label among them)."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
        preset = preset_values(name, self.muon_rate)
        form = self.form
        self.quiet = True
        try:
            for group, key in ((form.adam, wire.ADAM), (form.muon, wire.MUON), (form.muon_adam, AUX)):
                for field, v in preset[key].items():
                    group[field].value = v
            form.preset.options = list(PRESETS)
            form.preset.value = name
        finally:
            self.quiet = False
        self.applied, self.modified = name, False
        self.changed()

    def follow(self) -> None:
        """``modified`` and the dropdown ("<preset> (modified)") say whether what will be sent, the selected tab's
        fields, differs from the preset (in the form's units): an edit of the other tab marked the config sent too."""
        form = self.form
        sent = ((form.adam, wire.ADAM),) if self.kind == wire.ADAM else ((form.muon, wire.MUON), (form.muon_adam, AUX))
        modified = differs(sent, preset_values(self.applied, self.muon_rate))
        if modified != self.modified:
            self.modified = modified
            label = f"{self.applied} (modified)"
            self.quiet = True
            try:
                form.preset.options = [label, *PRESETS] if modified else list(PRESETS)
                form.preset.value = label if modified else self.applied
            finally:
                self.quiet = False

    def take_notice(self) -> str:
        """The notice to show now, once: the next change clears it."""
        notice, self.notice = self.notice, ""
        return notice

    def _tab(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.changed()
            return
        # ``selected_index = None`` (only code can) selected no tab, and the builder built and sent Muon params
        kind = self.locked or wire.OPTIMIZERS[change["old"] or 0]
        why = "this session's optimizer" if self.locked else "the tab selected before"
        self.notice = f"tabs.selected_index = None selects no optimizer: put back to {kind.capitalize()}, {why}"
        self.kind = kind

    def _picked(self, change: dict[str, Any]) -> None:
        if self.quiet:
            return
        if change["new"] is None:  # ``index = None`` (code): a blank dropdown, so the summary names no preset
            self.quiet = True
            try:
                self.form.preset.value = change["old"]
            finally:
                self.quiet = False
            self.notice = f"no preset selected (None, set in code): put back to {change['old']}, what the form holds"
            self.changed()
        elif change["new"] in PRESETS:
            self.apply(change["new"])
