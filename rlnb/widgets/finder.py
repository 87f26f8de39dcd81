"""The builder's "Find LR" controls: a learning-rate range test from the form, and Muon's lr units.

The button runs ``rlnb.sweep.lr_find`` on a background thread (errors show in the status line and in
``.error``); its suggestion fills the learning rate of the selected tab, and the plot shows beside it.
Switching Muon's units ("original" ↔ "match_adam") converts the rate for the model's matrix shapes.
"""

from __future__ import annotations

import html
import threading
from typing import Any, Protocol

import ipywidgets as W

from rlnb.params import OptimizerParams
from rlnb.session import Session
from rlnb.viz.plots import png
from rlnb.widgets.controls import WIDE


class Form(Protocol):
    """What the controls need of the builder they sit in (``rlnb.widgets.builder.OptimizerBuilder``)."""

    adam: dict[str, Any]
    muon: dict[str, Any]

    @property
    def kind(self) -> str: ...

    @property
    def valid(self) -> bool: ...

    @property
    def params(self) -> OptimizerParams: ...


class LRFinderControls:
    """``session`` (set by the RunPanel) is what a range test copies; without one it runs on a fresh
    local session of ``model``. ``options`` go to ``lr_find`` (``steps``, ``task``, ``start_lr``, ...)."""

    def __init__(self, builder: Form, model: Any = "tiny"):
        from rlnb.sweep import muon_shapes

        self.builder, self.model, self.shapes = builder, model, muon_shapes(model)
        self.session: Session | None = None
        self.options: dict[str, Any] = {"steps": 30}
        self.result: Any = None
        """The last ``LRFind``."""
        self.error: Exception | None = None
        self.button = W.Button(description="Find LR", icon="search", tooltip="learning-rate range test")
        self.scaling = W.Dropdown(options=["original", "match_adam"], description="Muon lr units", style=WIDE)
        self.status = W.HTML()
        # hidden until a range test has drawn something: an empty Image shows as a broken-image icon
        self.plot = W.Image(format="png", layout=W.Layout(width="360px", display="none"))
        self.widget = W.VBox([W.HBox([self.button, self.scaling, self.status]), self.plot])
        self._thread: threading.Thread | None = None
        self.button.on_click(lambda _: self.start())
        self.scaling.observe(self._convert, names="value")

    def _convert(self, change: dict[str, Any]) -> None:
        from rlnb.sweep import convert_muon_lr

        lr = self.builder.muon["learning_rate"]
        if lr.value > 0:
            lr.value = convert_muon_lr(lr.value, change["old"], change["new"], self.shapes)

    def run(self) -> Any:
        """Run the range test now (in this thread); fill the learning rate with the suggestion."""
        from rlnb.sweep import lr_find

        kind = self.builder.kind
        options = dict(self.options)
        if self.session is None:
            options.setdefault("model", self.model)
            if kind == "muon":
                options.setdefault("muon_scaling", self.scaling.value)
        self.status.value = "range test running …"
        result = lr_find(self.builder.params, self.session, **options)
        if result.muon_scaling is not None and result.muon_scaling != self.scaling.value:
            self.scaling.value = result.muon_scaling  # the session's units (the current rate is converted)
        if result.suggestion is not None:
            (self.builder.adam if kind == "adam" else self.builder.muon)["learning_rate"].value = result.suggestion
        self.plot.value = png(result.figure())
        self.plot.layout.display = None
        found = f"suggested {result.suggestion:.3g}" if result.suggestion is not None else "no suggestion"
        self.status.value = f"{found} — {html.escape(result.reason)}"
        self.result = result
        return result

    def start(self) -> None:
        """Run on a background thread (the button); errors show in the status line and in ``.error``."""
        if (self._thread is not None and self._thread.is_alive()) or not self.builder.valid:
            return
        self.error = None
        self.button.disabled = True
        self._thread = threading.Thread(target=self._run, name="rlnb-lr-find", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.run()
        except Exception as exc:  # noqa: BLE001 - shown in the panel, kept in .error
            self.error = exc
            self.status.value = f"<span style='color:#b00020'>✗ {html.escape(f'{type(exc).__name__}: {exc}')}</span>"
        finally:
            self.button.disabled = False

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
