"""The keyboard's focus back on a button, in the browser, only where the person still is: on nothing, or inside the
button's RunPanel. ipywidgets' ``focus()`` moves it wherever it is, and the kernel cannot see where it is: Find LR's
test, ending by itself a minute after the click, would take the focus from the cell the person has moved on to, and
so would a RunPanel's Step on a slow model.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import ipywidgets as W

REPLAY_S = 30
"""Seconds after it is sent that the script may still move the focus: a notebook reopened, or the view shown again,
draws the output again and runs it again, which must not take a focus then (the kernel's and the browser's clocks
agree to about a second where NTP keeps them)."""
SCRIPT = """(() => {
  if (Math.abs(Date.now() - %d) > %d) return;
  const at = document.activeElement;
  for (const button of document.querySelectorAll('button.%s')) {
    const panel = button.closest('.rlnb-run-panel') || button.parentElement;
    if (!button.disabled && (!at || at === document.body || panel.contains(at))) { button.focus(); return; }
  }
})();"""
"""Focus the button marked (its first view) if it is enabled and the focus is on nothing or inside its panel."""


class FocusBack:
    """``widget`` (hidden) runs the script that moves the focus; ``offer()`` sends it for ``button``."""

    def __init__(self, button: W.Button):
        self.mark = f"rlnb-focus-{uuid.uuid4().hex}"
        """The button's own class on the page, where the script finds it."""
        button.add_class(self.mark)
        self.widget = W.Output(layout=W.Layout(display="none"))
        self.widget.add_class("rlnb-focus-back")

    def offer(self) -> None:
        """The focus on the button, if the person is still at its panel (``SCRIPT``), sent as a JavaScript output in
        place of the last one (each its own, by the time it was sent)."""
        code = SCRIPT % (round(time.time() * 1000), REPLAY_S * 1000, self.mark)
        self.widget.outputs = (
            {"output_type": "display_data", "data": {"application/javascript": code}, "metadata": {}},
        )


def to_stopper(panel: Any) -> None:
    """A click on ``panel``'s Stop ended another panel's run or range test on its session: the person is at ``panel``,
    whose Stop, disabled as that run ended, dropped the focus to the page, and the other panel's script took it from
    there to its own button, out of sight up the notebook. ``panel``'s Step takes it (if it can be clicked), as a
    panel's own Stop gives it to the button that started its run."""
    if not panel.step_button.disabled:
        panel.step_button.focus()
