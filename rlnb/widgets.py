"""Notebook widgets: build an optimizer config with controls, and drive a session from a panel.

``OptimizerBuilder`` is a form over ``AdamParams`` / ``MuonParams``: the params object is the one
source of truth, validated by the same rules (errors name the field), previewed as the exact JSON
body, with a learning-rate schedule and its plot. ``RunPanel`` adds Step / Run N / Stop over a
session, running on a background thread so the kernel stays free and Stop works mid-run.
"""

from __future__ import annotations

import html
import json
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as W
from matplotlib.figure import Figure

from rlnb._exceptions import InvalidParams, OperationFailed, RlnbError
from rlnb.live import LiveView
from rlnb.params import ADAM_FIELDS, MUON_FIELDS, AdamParams, MuonParams, OptimizerParams
from rlnb.plots import png
from rlnb.schedule import Schedule
from rlnb.session import Session
from rlnb.tasks import Task, digits_task, rl_step


def _preset(adam: tuple[float, float, float, float, float, float], muon: tuple[float, float, int, float, float]) -> Any:
    """One preset: the same AdamW values for an Adam session and for Muon's non-matrix weights."""
    adam_values = dict(zip(ADAM_FIELDS, adam, strict=True))
    return {"adam": adam_values, "muon": dict(zip(MUON_FIELDS, muon, strict=True)), "muon.adam": dict(adam_values)}


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # The values in Together's optim-step reference example (lr, beta1, beta2, eps, wd, clip).
    "Together docs": _preset((1e-4, 0.9, 0.95, 1e-8, 0.1, 10.0), (0.02, 0.95, 5, 0.0, 10.0)),
    # KellerJordan/Muon: SingleDeviceMuonWithAuxAdam defaults (Muon lr 0.02, momentum 0.95, wd 0; aux
    # AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-10, wd 0). KJ does not clip: 0 = off.
    "Keller Jordan Muon": _preset((3e-4, 0.9, 0.95, 1e-10, 0.0, 0.0), (0.02, 0.95, 5, 0.0, 0.0)),
    # For teaching: far too large, clipping off — watch the reward collapse (or NON_FINITE_LOSS).
    "Too high (teaching)": _preset((0.5, 0.9, 0.95, 1e-8, 0.0, 0.0), (5.0, 0.95, 5, 0.0, 0.0)),
}

_WIDE = {"description_width": "110px"}
LR_RANGES = {"adam": (-6, 0), "muon": (-4, 1), "muon.adam": (-6, 0)}
"""Slider ranges (log10) for the learning rate; the text box beside it takes any value."""


class _LearningRate:
    """A log-scale slider for dragging and a text box for exact entry, kept in step."""

    def __init__(self, lo: int, hi: int, description: str):
        self.slider = W.FloatLogSlider(
            min=lo,
            max=hi,
            base=10,
            step=0.05,
            description=description,
            continuous_update=False,
            readout=False,
            style=_WIDE,
        )
        self.text = W.FloatText(layout=W.Layout(width="110px"))
        self.box = W.HBox([self.slider, self.text])
        self._busy = False
        self.slider.observe(lambda ch: self._sync(self.text, ch["new"]), names="value")
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
        lo, hi = 10**self.slider.min, 10**self.slider.max
        if lo <= change["new"] <= hi:  # out-of-range values stay in the text box for validation
            self._sync(self.slider, change["new"])

    @property
    def value(self) -> float:
        return float(self.text.value)

    @value.setter
    def value(self, v: float) -> None:
        self.text.value = v

    def observe(self, fn: Callable[[dict[str, Any]], None]) -> None:
        self.text.observe(fn, names="value")


def _controls(fields: tuple[str, ...], lr_range: tuple[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in fields:
        label = name.replace("_", " ")
        if name == "learning_rate":
            out[name] = _LearningRate(*lr_range, description="learning rate")
        elif name == "newton_schulz_steps":
            out[name] = W.IntText(description="NS steps", style=_WIDE)
        else:
            out[name] = W.FloatText(description=label, style=_WIDE)
    return out


def _box(controls: dict[str, Any]) -> W.VBox:
    return W.VBox([c.box if isinstance(c, _LearningRate) else c for c in controls.values()])


class OptimizerBuilder:
    """Build ``AdamParams`` / ``MuonParams`` with controls.

    ``.params`` is the validated config (``InvalidParams`` if a field is out of range), ``.errors`` the
    current problems, the JSON preview equals ``.params.request_body()``, and ``.schedule(step)`` the
    scheduled learning rate; ``.params_at(step)`` is the config to send at that step.
    """

    def __init__(
        self, optimizer: str = "adam", preset: str = "Together docs", total_steps: int = 100, model: Any = "tiny"
    ):
        if optimizer not in ("adam", "muon"):
            raise ValueError(f"optimizer must be 'adam' or 'muon', got {optimizer!r}")
        self.adam = _controls(ADAM_FIELDS, LR_RANGES["adam"])
        self.muon = _controls(MUON_FIELDS, LR_RANGES["muon"])
        self.muon_adam = _controls(ADAM_FIELDS, LR_RANGES["muon.adam"])
        self.tabs = W.Tab(
            children=[
                _box(self.adam),
                W.VBox(
                    [
                        _box(self.muon),
                        W.HTML("<b>adam</b> — for embeddings, output head, norms, biases"),
                        _box(self.muon_adam),
                    ]
                ),
            ]
        )
        self.tabs.set_title(0, "Adam")
        self.tabs.set_title(1, "Muon")
        self.tabs.selected_index = 0 if optimizer == "adam" else 1
        self.preset = W.Dropdown(options=list(PRESETS), description="preset")
        self.sched_kind = W.Dropdown(options=["constant", "linear", "cosine"], description="schedule", style=_WIDE)
        self.warmup = W.IntText(value=0, description="warmup steps", style=_WIDE)
        self.total = W.IntText(value=total_steps, description="total steps", style=_WIDE)
        self.min_ratio = W.FloatText(value=0.1, description="min lr ratio", style=_WIDE)
        self.preview = W.HTML()
        self.message = W.HTML()
        self.schedule_plot = W.Image(format="png", layout=W.Layout(width="360px"))
        self.lr_finder = LRFinderControls(self, model)  # "Find LR", and Muon's lr units for ``model``'s shapes
        self.widget = W.VBox(
            [
                self.preset,
                self.tabs,
                self.message,
                W.HBox([W.VBox([self.sched_kind, self.warmup, self.total, self.min_ratio]), self.schedule_plot]),
                self.lr_finder.widget,
                self.preview,
            ]
        )
        self._callbacks: list[Callable[[OptimizerBuilder], None]] = []
        self._params: OptimizerParams | None = None
        self.errors: list[str] = []
        self._quiet = False
        self.apply_preset(preset)
        for group in (self.adam, self.muon, self.muon_adam):
            for c in group.values():
                c.observe(self._changed) if isinstance(c, _LearningRate) else c.observe(self._changed, names="value")
        for c in (self.sched_kind, self.warmup, self.total, self.min_ratio):
            c.observe(self._changed, names="value")
        self.tabs.observe(self._changed, names="selected_index")
        self.preset.observe(lambda ch: self.apply_preset(ch["new"]), names="value")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    # -- state -----------------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        return "adam" if self.tabs.selected_index == 0 else "muon"

    @kind.setter
    def kind(self, value: str) -> None:
        self.tabs.selected_index = 0 if value == "adam" else 1

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def params(self) -> OptimizerParams:
        """The config as built now; raises ``InvalidParams`` naming the fields that are out of range."""
        if self._params is None:
            self._params = self._build()
        return self._params

    def on_change(self, callback: Callable[[OptimizerBuilder], None]) -> None:
        """Call ``callback(builder)`` after every change of a control."""
        self._callbacks.append(callback)

    def apply_preset(self, name: str) -> None:
        """Fill every control from ``PRESETS[name]`` (one update of the preview at the end)."""
        values = PRESETS[name]
        self._quiet = True
        try:
            for group, key in ((self.adam, "adam"), (self.muon, "muon"), (self.muon_adam, "muon.adam")):
                for field, v in values[key].items():
                    group[field].value = v
        finally:
            self._quiet = False
        if self.preset.value != name:
            self.preset.value = name
        self._changed()

    def get_schedule(self) -> Schedule:
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

    def _values(self, group: dict[str, Any]) -> dict[str, Any]:
        return {name: c.value for name, c in group.items()}

    def _build(self) -> OptimizerParams:
        if self.kind == "adam":
            return AdamParams(**self._values(self.adam))
        try:
            adam = AdamParams(**self._values(self.muon_adam))
        except InvalidParams as exc:
            raise InvalidParams("MuonParams.adam", exc.errors) from None
        return MuonParams(**self._values(self.muon), adam=adam)

    def _changed(self, change: Any = None) -> None:
        if self._quiet:
            return
        self._params = None
        self.errors = []
        try:
            body = self.params.request_body()
        except InvalidParams as exc:
            self.errors = str(exc).splitlines()
            self.message.value = "".join(f"<div style='color:#b00020'>✗ {e}</div>" for e in self.errors)
            self.preview.value = "<i>not sendable until the fields above are fixed</i>"
        else:
            self.message.value = "<span style='color:#1b5e20'>✓ valid</span>"
            self.preview.value = f"<pre style='margin:0'>{json.dumps(body, indent=2)}</pre>"
        try:
            schedule = self.get_schedule()
        except ValueError as exc:
            self.errors.append(str(exc))
            self.message.value += f"<div style='color:#b00020'>✗ {exc}</div>"
        else:
            if self.valid:
                self._draw_schedule(schedule)
        for cb in list(self._callbacks):
            cb(self)

    def _draw_schedule(self, schedule: Schedule) -> None:
        steps = range(0, int(schedule.total_steps * 1.1) + 1)
        base = float(self.params.learning_rate or 0.0)
        fig = Figure(figsize=(3.6, 1.8), layout="constrained")
        ax = fig.add_subplot()
        ax.plot(list(steps), [schedule(s, base) for s in steps], color="C0")
        ax.set(xlabel="step", ylabel="learning rate", title=f"{schedule.kind}, warmup {schedule.warmup_steps}")
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
        self.schedule_plot.value = png(fig)

    def close(self) -> None:
        """Close every control of the builder (the front end removes them)."""
        _close_tree(self.widget)


StepFn = Callable[[Session, OptimizerParams], dict[str, float] | None]
"""``step_fn(session, params)`` runs one training step and returns figures to log (or None)."""


class RunPanel:
    """Step a session from the notebook: the builder, Step / Run N / Stop, a progress bar, and a live
    table and plot of the session's operations.

    Each step sends ``builder.params_at(step)`` (the schedule applied). By default a step is one RL
    step of ``task`` (the demo's digits task) and logs its mean reward; pass ``step_fn`` for your own
    loop. Runs go on a background thread, so the kernel stays free and Stop works mid-run (a stop
    takes effect between steps). A failed operation stops the run and shows its error code and
    message in the panel, not a traceback.
    """

    def __init__(
        self,
        session: Session,
        builder: OptimizerBuilder | None = None,
        *,
        step_fn: StepFn | None = None,
        task: Task | None = None,
        n_steps: int = 20,
        every: float = 0.5,
    ):
        self.session = session
        self.builder = builder or OptimizerBuilder(session.optimizer, total_steps=n_steps)
        self.builder.kind = session.optimizer
        self.builder.lr_finder.session = session
        self.task = task or digits_task()
        self.step_fn = step_fn or self._rl_step
        self.step_button = W.Button(description="Step", icon="step-forward", button_style="primary")
        self.run_button = W.Button(description="Run N", icon="play")
        self.n = W.BoundedIntText(value=n_steps, min=1, max=100_000, description="N", layout=W.Layout(width="140px"))
        self.stop_button = W.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="progress")
        self.status = W.HTML()
        self.live = LiveView(session.history, metrics=("reward",), every=every)
        self.widget = W.VBox(
            [
                self.builder.widget,
                W.HBox([self.step_button, self.run_button, self.n, self.stop_button]),
                self.progress,
                self.status,
                self.live.widget,
            ]
        )
        self.error: OperationFailed | RlnbError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.step_button.on_click(lambda _: self.start(1))
        self.run_button.on_click(lambda _: self.start(int(self.n.value)))
        self.stop_button.on_click(lambda _: self.stop())
        self.builder.on_change(lambda _: self._sync_buttons())
        self._show(f"step {session.step} · ready")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, n: int) -> None:
        """Run ``n`` steps on a background thread (ignored while a run is going or the config is invalid)."""
        if self.running or not self.builder.valid:
            return
        self._stop.clear()
        self.error = None
        self.progress.max, self.progress.value = n, 0
        self._thread = threading.Thread(target=self._run, args=(n,), name="rlnb-run-panel", daemon=True)
        self._thread.start()
        self._sync_buttons()

    def stop(self) -> None:
        """Ask the run to stop after the step in progress."""
        self._stop.set()
        self._show("stopping after this step …")

    def join(self, timeout: float | None = None) -> None:
        """Wait for the current run to end (tests, scripts)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, n: int) -> None:
        done = 0
        try:
            for _ in range(n):
                if self._stop.is_set():
                    break
                params = self.builder.params_at(self.session.step)
                figures = self.step_fn(self.session, params)
                done += 1
                self.progress.value = done
                step = self.session.step
                if figures:
                    self.session.history.log(step, **figures)
                self._show(
                    f"step {step} · {done}/{n} done" + "".join(f" · {k} {v:.3g}" for k, v in (figures or {}).items())
                )
        except (OperationFailed, RlnbError) as exc:
            self.error = exc
            code = getattr(exc, "code", None) or type(exc).__name__
            message = getattr(exc, "message", None) or str(exc)
            self._show(
                f"step {self.session.step} · stopped: <b>{html.escape(str(code))}</b> — {html.escape(str(message))}",
                error=True,
            )
        else:
            stopped = done < n
            self._show(
                f"step {self.session.step} · " + (f"stopped early after {done} of {n}" if stopped else f"{n} done")
            )
        finally:
            self._thread = None
            self._sync_buttons()
            self.live.refresh()

    def _rl_step(self, session: Session, params: OptimizerParams) -> dict[str, float]:
        return {"reward": rl_step(session, self.task, params).reward}

    def _show(self, text: str, error: bool = False) -> None:
        color = "#b00020" if error else "inherit"
        self.status.value = f"<span class='rlnb-status' style='color:{color}'>{text}</span>"

    def _sync_buttons(self) -> None:
        busy = self.running
        self.step_button.disabled = self.run_button.disabled = busy or not self.builder.valid
        self.stop_button.disabled = not busy

    def close(self) -> None:
        """Stop any run, stop following the history and close the widgets."""
        self.stop()
        self.join()
        self.live.close()
        _close_tree(self.widget)


def _close_tree(widget: W.Widget) -> None:
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    widget.close()


class LRFinderControls:
    """The builder's "Find LR" button (``rlnb.sweep.lr_find`` on a background thread; the suggestion
    fills the learning rate of the selected tab and the plot shows beside it), and the units of Muon's
    learning rate: switching "original" ↔ "match_adam" converts the rate for ``model``'s matrix shapes.

    ``session`` (set by the RunPanel) is what a range test copies; without one it runs on a fresh local
    session of ``model``. ``options`` go to ``lr_find`` (``steps``, ``task``, ``start_lr``, ...).
    """

    def __init__(self, builder: OptimizerBuilder, model: Any = "tiny"):
        from rlnb.sweep import muon_shapes

        self.builder, self.model, self.shapes = builder, model, muon_shapes(model)
        self.session: Session | None = None
        self.options: dict[str, Any] = {"steps": 30}
        self.result: Any = None
        """The last ``LRFind``."""
        self.error: Exception | None = None
        self.button = W.Button(description="Find LR", icon="search", tooltip="learning-rate range test")
        self.scaling = W.Dropdown(options=["original", "match_adam"], description="Muon lr units", style=_WIDE)
        self.status = W.HTML()
        self.plot = W.Image(format="png", layout=W.Layout(width="360px"))
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
