"""The live view's panels (``rlnb.viz.live``): which lines each one holds (``new_panel``) and how one is drawn
from its series (``draw_panel``): raw or smoothed, on a linear or log axis, the clip threshold where clipping is
on, and a note saying why a panel has nothing to draw yet.
"""

from __future__ import annotations

import math

import numpy as np

from rlnb._input.shown import printable
from rlnb.history.figures import EVAL_ACCURACY, RLMetric
from rlnb.viz.draw import CLIP_HEADROOM, all_nan, not_logged
from rlnb.viz.lines import inf_label, inf_marks
from rlnb.viz.livefig import Panel
from rlnb.viz.names import long_name
from rlnb.viz.series import Series

NORMS = {
    "grad_norm": ("C1", "global"),
    "grad_norm_muon": ("C4", "Muon matrices"),
    "grad_norm_adam": ("C2", "AdamW params"),
}

_NONE = np.empty(0)
PARTS = ("grad_norm_muon", "grad_norm_adam")
"""Muon's two partial norms: drawn, and named in the legend, once one is reported."""


def new_panel(
    name: str, title: str, color: str, series: dict[str, Series], ema: float, metrics: list[str], *, muon: bool,
    per_row: int,
) -> Panel:  # fmt: skip
    """The panel of ``name``, its lines' series added to ``series``: the reward's draws the held-out accuracy too
    (unless it is one of ``metrics``), the gradient norm's the clip threshold (and, for Muon, the two partial norms).
    ``per_row``: sized to share a row with that many panels (``livefig.PANEL_PX``)."""
    panel = Panel(printable(title), legend=name == "grad_norm", per_row=per_row)
    if name == RLMetric.REWARD and EVAL_ACCURACY not in metrics:  # the held-out accuracy beside the reward
        _lines(panel, series, ema, name, color, "reward (train)")
        panel.line(EVAL_ACCURACY, color="C3", ms=4, label=long_name(EVAL_ACCURACY), zorder=3)
        series[EVAL_ACCURACY] = Series(ema)
    elif name == "grad_norm":
        for col, (c, label) in NORMS.items():
            if muon or col == "grad_norm":
                _lines(panel, series, ema, col, c, label)
        panel.line("grad_clip_norm", ls="--", color="0.4", label="clip threshold")
        series["grad_clip_norm"] = Series(ema)
    else:
        _lines(panel, series, ema, name, color, printable(name))
    return panel


def _lines(panel: Panel, series: dict[str, Series], ema: float, col: str, color: str, label: str) -> None:
    series[col] = Series(ema)
    z = 2.5 if col == "grad_norm" else 2  # the global norm on top of its two parts
    panel.line(col, color=color, label=label, lw=1.5, ms=3, zorder=z)
    panel.line(col + ":ema", color=color, lw=2.2, label=f"{label} (EMA {ema:g})", zorder=z)
    for sign, _, style in inf_marks(panel.ax):
        panel.line(f"{col}:{sign}inf", color=color, zorder=z, **style)


def _infs(panel: Panel, key: str, s: Series) -> list[str]:
    """The marks on the frame of ``key``'s steps at +inf and -inf, as the static plots draw them (``inf_marks``,
    ``inf_label``): the keys of those shown, for the legend. The held-out accuracy has none."""
    shown = []
    for sign, edge, _ in inf_marks(panel.ax) if f"{key}:+inf" in panel.lines else ():
        mark, n = f"{key}:{sign}inf", s.inf_n[sign]
        at = s.infs[sign].xy()[0]
        panel.set(mark, at, np.full(len(at), edge), visible=n > 0, markers=None)
        if n:
            panel.set_label(mark, inf_label(str(panel.lines[key].get_label()), sign, n))
            shown.append(mark)
    return shown


def draw_panel(
    panel: Panel, name: str, series: dict[str, Series], *, smooth: bool, log_y: bool, na_reason: str | None,
    logged: bool,
) -> bytes:  # fmt: skip
    """The panel of ``name`` drawn as a PNG (``smooth``: its EMA shown; ``na_reason``: why the latest step has no
    gradient norm; ``logged``: ``name`` is a figure given to ``log``, which says so while none has come)."""
    keys = [k for k in panel.lines if ":" not in k and k != "grad_clip_norm"]
    lo, hi, pos, x_last = math.inf, -math.inf, math.inf, 0.0  # pos: the lowest point above 0, a log axis' floor
    finite = below = 0  # the finite points, and those <= 0 among them, which a log axis does not draw
    infs: list[str] = []
    for key in keys:
        s = series[key]
        raw = panel.lines[key]
        smoothed = key + ":ema" in panel.lines  # all but the held-out accuracy: a few points, never smoothed
        # a Muon part in the legend once a norm of it came: a backend that reports none listed two empty lines
        drawn = s.n > 0 if not smoothed else key not in PARTS or math.isfinite(s.hi)
        panel.set(key, *s.raw.xy(), visible=drawn)
        if smoothed:
            ex, ey = s.smooth.xy() if smooth else (_NONE, _NONE)  # the EMA is drawn only when shown
            panel.set(key + ":ema", ex, ey, visible=smooth and drawn, markers=False)
            raw.set_alpha(0.35 if smooth else 1.0)
        infs += _infs(panel, key, s)
        lo, hi, pos = min(lo, s.lo), max(hi, s.hi), min(pos, s.pos_lo)
        finite, below = finite + s.finite, below + s.below
        if s.n:
            x_last = max(x_last, s.last_x)
    note = ""
    named = [k + ":ema" if smooth else k for k in keys if k != EVAL_ACCURACY]  # the lines, in a legend
    if name == "grad_norm":
        if not math.isfinite(hi) and not infs:  # a remote API reports none: say why (the clip threshold may show)
            note = na_reason or "no gradient norm yet"
        lo, hi = _clip(panel, series["grad_clip_norm"], lo, hi)
        panel.legend([*named, "grad_clip_norm", *infs], inside=not panel.beside)
    elif not math.isfinite(hi) and not infs:
        note = _empty(name, series[name].n, logged=logged)
    if name != "grad_norm":  # a legend inside once the held-out accuracy or an infinity is there
        held_out = [EVAL_ACCURACY] if EVAL_ACCURACY in panel.lines and series[EVAL_ACCURACY].n else []
        panel.legend([*named, *held_out, *infs] if held_out or infs else [], inside=True)
    log = log_y and hi > 0  # a log axis needs a positive point: until one comes, it stays linear
    panel.set_log(log)
    if log and below:  # said in a corner: joined across them, a run that sat at 0 would look like a smooth curve
        panel.set_note(f"{below} of {finite} points ≤ 0 not drawn (log y)", corner=True)
    else:
        panel.set_note(note)
    panel.set_limits(x_last, min(lo if lo > 0 else pos, hi) if log else lo, hi)  # a 0 is not drawn on a log axis
    return panel.render()


def _empty(name: str, came: int, *, logged: bool) -> str:
    """Why the panel of ``name`` has no line, where ``came`` points came and none was a number."""
    if not came:
        return not_logged(name) if logged else "no completed optimizer step yet"
    return all_nan(name, came) if logged else all_nan(name, per_step=True)


def _clip(panel: Panel, clip: Series, lo: float, hi: float) -> tuple[float, float]:
    """The clip threshold where clipping is on. The y-range takes it in only when it is near the
    norms; else the legend gives its value, off the top of the axes."""
    on = math.isfinite(clip.hi)
    panel.set("grad_clip_norm", *clip.raw.xy(), visible=on, markers=False)
    near = on and (not math.isfinite(hi) or clip.hi <= CLIP_HEADROOM * hi)
    panel.set_label(
        "grad_clip_norm", "clip threshold" if near or not on else f"clip threshold {clip.hi:g} (off the top)"
    )
    return (min(lo, clip.lo), max(hi, clip.hi)) if near else (lo, hi)
