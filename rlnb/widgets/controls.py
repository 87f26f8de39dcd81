"""The controls an optimizer form is made of: a learning-rate slider with exact entry, fields two to a
row, and a red mark on a refused field (a CSS class, styled by ``STYLE``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import ipywidgets as W
import traitlets

from rlnb._input.checks import ascii_number
from rlnb._input.shown import shown
from rlnb.errors import SHOWN_VALUE

WIDE = {"description_width": "110px"}
IN_ROW = "calc(100% - 4px)"
"""The widest a control may be: its row less its margins (``--jp-widgets-margin``), which ran past the row."""


def field() -> W.Layout:
    """A form field's layout, a new one for each field: a module-level ``Layout`` shared by every form was closed with
    the first form closed by ``Widget.close_all()`` (or a test's clean-up), and every later form then failed to open."""
    return W.Layout(width="290px", max_width=IN_ROW)


PAIRS = "repeat(auto-fill, min(300px, 100%))"
"""Fields two to a row (300 px each, at most ``PAIRS_WIDTH`` wide), one to a row in a narrower column: two fixed
columns cut the right one's boxes in a column under 608 px (JupyterLab at 125% zoom on a laptop gives 598); and
narrower than one field, the field narrows (a 400 px panel's 288 px column cut its fields' boxes)."""
PAIRS_WIDTH = "608px"
INVALID = "rlnb-invalid"
"""CSS class of a control whose value is refused (styled red by ``STYLE``)."""
TEXT = "rlnb-text"
"""CSS class of a line of free text (status, messages): a token longer than the line (a path, an id) breaks instead
of running out of the box, where the panel cut it off unseen (``STYLE``)."""
STYLE = (
    "<style>.rlnb-invalid input, .rlnb-invalid select {border: 2px solid #b00020 !important;"
    " background: #fdecea !important} .rlnb-invalid .widget-label {color: #b00020}"
    f" .{TEXT} {{overflow-wrap: anywhere}}</style>"
)


def significant(value: float, digits: int = 3) -> float:
    """``0.31622776601683794`` → ``0.316``: what a slider position means, as a person would write it."""
    return float(f"{value:.{digits}g}")


def _read(text: str, box: W.Widget) -> float:
    """What the browser sent ``box``, as the kernel reads it (``ascii_number``): "1e400" is inf and an empty or
    unreadable box NaN, each refused by the check naming the field and its range; what was typed stays in the box."""
    box.typed = text
    value, old = _number(text), box.value
    if value == old and math.copysign(1.0, value) != math.copysign(1.0, old):  # traitlets takes -0.0 == 0.0 for no
        # change: "-0" then "0" re-checked nothing, and the form's message went on naming -0.0 (sent after the value)
        box.notify_change(traitlets.Bunch(name="value", old=old, new=value, owner=box, type="change"))
    return value


def _number(text: str) -> float:
    try:
        return ascii_number(text.strip())
    except ValueError:
        return math.nan


def _shown(value: float, box: W.Widget) -> str:
    """``value`` for the box: as typed if that reads as it (1e-3 not rewritten 0.001; 1e400 kept), else as Python
    writes it."""
    text = typed(box, value)
    if text is not None:
        return text
    box.typed = None
    return str(value)


def typed(box: Any, value: Any = None) -> str | None:
    """The text typed in ``box`` while its value (``value``, else ``box.value``) is what that text reads as, else
    None: a refusal quotes it (``'1e400'``), where the value read (``inf``) is a number nobody typed."""
    text = getattr(box, "typed", None)
    if text is None:
        return None
    read, value = _number(text), box.value if value is None else value
    return text if read == value or (read != read and value != value) else None  # NaN: unequal to itself


def quote_typed(message: str, owner: str, boxes: dict[str, Any]) -> str:
    """``message`` (``Owner.field = value is invalid: ...``) with the value as typed in the field's box, quoted, where
    it says another (``inf`` for "1e400"; "2.5" is said 2.5, as typed)."""
    match = re.match(rf"{owner}\.(\w+) = (.*?) is invalid", message)
    text = typed(boxes.get(match.group(1))) if match else None
    if match is None or text is None or text == match.group(2):
        return message
    return f"{message[: match.start(2)]}{shown(text, SHOWN_VALUE)}{message[match.end(2) :]}"


class NumberBox(W.Text):
    """A number field that the kernel reads from the text typed: a ``FloatText`` put back, without a word, what the
    browser's ``parseFloat`` cannot hold (1e400, an empty box), and the form said "✓ valid" for a value nobody typed.
    Sent on Enter or leaving the box, as ``FloatText``'s."""

    value = traitlets.Float(0.0).tag(sync=True, to_json=_shown, from_json=_read)

    def __init__(self, **kwargs: Any):
        self.typed: str | None = None
        """The text last typed in the browser: the box keeps showing it while the value is the one it reads as."""
        super().__init__(continuous_update=False, **kwargs)


class StepsBox(NumberBox):
    """Muon's NS steps: a count, shown as one (5, not 5.0); a float read from the text, so that 2.5 and 1e300 reach
    the check as typed (``values`` sends a whole one as an int)."""

    value = traitlets.Float(0.0).tag(sync=True, to_json=lambda v, box: _shown(whole(v), box), from_json=_read)


class LearningRate:
    """A log-scale slider for dragging and a text box for exact entry, kept in step. Values set by
    the slider are rounded to 3 significant digits; a value typed beyond its range puts it at that end."""

    def __init__(self, lo: int, hi: int, description: str):
        self.slider = W.FloatLogSlider(
            min=lo,
            max=hi,
            base=10,
            step=0.05,
            description=description,
            continuous_update=False,
            readout=False,
            style=WIDE,
            layout=W.Layout(flex="1 1 240px", max_width="480px"),
        )
        self.text = NumberBox(layout=W.Layout(width="110px"))
        # the box under the slider in a column too narrow for both (else the slider's label is cut)
        self.box = W.HBox([self.slider, self.text], layout=W.Layout(flex_flow="row wrap"))
        self._busy = False
        self.units: dict[str, float] = {}
        """Muon's rate in the units it was last converted from and to (``convert_units``), while it holds one."""
        self.slider.observe(lambda ch: self._sync(self.text, significant(ch["new"])), names="value")
        self.text.observe(self._from_text, names="value")

    def _sync(self, target: W.ValueWidget, value: float) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            target.value = value
        finally:
            self._busy = False

    def _from_text(self, change: dict[str, Any]) -> None:
        """The slider follows every value typed; one outside its range (1000, 1e-9: valid rates) puts it at that end
        and its tooltip says the box holds the rate sent: a slider left where it is would show a rate not sent."""
        v, lo, hi = change["new"], 10.0**self.slider.min, 10.0**self.slider.max
        if lo <= v <= hi:
            self.slider.tooltip = None
        else:  # NaN leaves it where it is: refused, the box is marked and the form says why
            where = "not a number" if math.isnan(v) else f"{'below' if v < lo else 'above'} the slider's range"
            self.slider.tooltip = f"{v:g} is {where} ({lo:g} to {hi:g}): the box beside it holds the rate"
        if not math.isnan(v):
            self._sync(self.slider, min(max(v, lo), hi))

    @property
    def value(self) -> float:
        return float(self.text.value)

    @value.setter
    def value(self, v: float) -> None:
        self.text.value = v

    @property
    def disabled(self) -> bool:
        return bool(self.text.disabled)

    @disabled.setter
    def disabled(self, value: bool) -> None:
        self.slider.disabled = self.text.disabled = value

    def observe(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self.text.observe(fn, names="value")

    def mark(self, invalid: bool) -> None:
        (self.text.add_class if invalid else self.text.remove_class)(INVALID)


def convert_units(lr: LearningRate, old: str, new: str, shapes: Any) -> str:
    """Set ``lr`` from Muon units ``old`` to ``new`` (for the model's matrix ``shapes``); returns what the form
    must say, or "". Converted back, the rate is the one typed (not 0.0123 back as 0.012300000000000002, nor 5e-324,
    0 in match_adam units, back as 0); a rate that is not a finite number > 0 is left as it is, and said (inf would
    raise from the dropdown's observer, to the kernel's log only)."""
    from rlnb.sweep.lr.muon import muon_lr_factor

    v = lr.value
    if lr.units.get(old) == v and new in lr.units:
        lr.value = lr.units[new]
        return ""
    if not (math.isfinite(v) and v > 0):
        return f"✗ Muon lr {v:g} was not converted to {new} units: only a finite rate > 0 converts; type it in {new}"
    out = float(v) * muon_lr_factor(old, new, shapes)  # convert_muon_lr's product, shown even past a float
    lr.units = {old: v, new: out}
    lr.value = out
    if math.isfinite(out) and out > 0:
        return ""
    return f"✗ Muon lr {v:g} in {old} units is {out:g} in {new} units, beyond a float: type a rate in {new} units"


def controls(fields: tuple[str, ...], lr_range: tuple[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in fields:
        if name == "learning_rate":
            out[name] = LearningRate(*lr_range, description="learning rate")
        elif name == "newton_schulz_steps":
            out[name] = StepsBox(description="NS steps", style=WIDE, layout=field())
        else:
            out[name] = NumberBox(description=name.replace("_", " "), style=WIDE, layout=field())
    return out


def grid(group: dict[str, Any]) -> W.VBox:
    """The learning rate across the top, the other fields two to a row."""
    rate = [c.box for c in group.values() if isinstance(c, LearningRate)]
    fields = [c for c in group.values() if not isinstance(c, LearningRate)]
    return W.VBox([*rate, pairs(fields)])


def pairs(fields: list[Any], **layout: str) -> W.GridBox:
    """``fields`` two to a row where they fit, else one to a row (``PAIRS``)."""
    return W.GridBox(
        fields, layout=W.Layout(grid_template_columns=PAIRS, grid_gap="2px 8px", max_width=PAIRS_WIDTH, **layout)
    )


def opener(fold: W.Accordion, icon: str, tooltip: str) -> tuple[W.ToggleButton, W.HBox]:
    """A button beside ``fold``'s title that opens and folds it as a click on the title does, from the keyboard too
    (Tab to it, Enter): an accordion's title takes no focus. Returns it and the row of both."""
    button = W.ToggleButton(
        value=fold.selected_index is not None, icon=icon, tooltip=tooltip, layout=W.Layout(width="36px", padding="0")
    )
    button.observe(lambda ch: fold.set_trait("selected_index", 0 if ch["new"] else None), names="value")
    fold.observe(lambda ch: button.set_trait("value", ch["new"] is not None), names="selected_index")
    fold.layout = W.Layout(flex="1 1 0%", min_width="0")  # the rest of the row, however narrow
    return button, W.HBox([button, fold], layout=W.Layout(align_items="flex-start"))


def mark(control: Any, invalid: bool) -> None:
    if isinstance(control, LearningRate):
        control.mark(invalid)
    elif invalid:
        control.add_class(INVALID)
    else:
        control.remove_class(INVALID)


class CountBox(NumberBox):
    """A box for a count of steps, read through ``whole``: the browser reads an ``IntText`` with ``parseInt``, which
    took "1e5" as 1 and "2.5" as 2 while the box still showed what was typed. It sends the text typed, read as a
    float; an int set in code stays that int (10**400 is refused by the check naming the field, not by the box)."""

    value = traitlets.Union([traitlets.Int(), traitlets.Float()], default_value=0).tag(
        sync=True, to_json=_shown, from_json=_read
    )


def whole(value: Any) -> Any:
    """A whole-number float up to 2**53 as an int; anything else as it is, for the check to refuse naming it (2.5
    stays 2.5; so does 1e300, which as an int filled the form's error line with 301 digits)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


def values(group: dict[str, Any]) -> dict[str, Any]:
    """The controls' values; a whole number of Newton-Schulz steps as an int (``whole``)."""
    out = {name: c.value for name, c in group.items()}
    if "newton_schulz_steps" in out:
        out["newton_schulz_steps"] = whole(out["newton_schulz_steps"])
    return out


def close_tree(widget: W.Widget) -> None:
    """Close a widget and everything inside it."""
    for child in getattr(widget, "children", ()):
        close_tree(child)
    widget.close()
