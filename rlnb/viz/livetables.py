"""The HTML tables of the live view that RL runs add: the RL metrics of the latest steps and one step's
completions. A completion is any text a model wrote, so every cell is escaped and control characters are
shown as escapes."""

from __future__ import annotations

import html
import math
from typing import Any

from rlnb.history.steplog import StepRow
from rlnb.tasks import RL_METRICS

MAX_COMPLETIONS = 64
"""Completions shown at most (a step's, in prompt order); the run folder keeps them all."""
MAX_CHARS = 200
"""Characters of a completion shown (the whole text is in ``history.completions``)."""
RL_TABLE = tuple(m for m in RL_METRICS if m != "reward")
"""The RL metrics of the RL tab (reward is in the steps table); they get no panel of their own in the
live view's automatic mode (``metrics=None``) unless named."""
TABLE_STYLE = "font-size:small;line-height:1.25;border-collapse:collapse"
"""The style of every table of the live view."""
CELL_STYLE = "text-align:right;padding:1px 8px"


def number(value: float | None) -> str:
    """A figure in a table cell: four significant digits, empty when missing."""
    return "" if value is None or math.isnan(value) else f"{value:.4g}"


def rl_html(latest: list[tuple[StepRow, dict[str, float]]]) -> str:
    """The RL metrics of the latest steps, newest first (a column per metric logged)."""
    cols = [m for m in RL_TABLE if any(m in user for _, user in latest)]
    if not cols:
        return "<i>no RL metrics logged yet (rlnb.tasks.rl_step logs them)</i>"
    head = "".join(f"<th style='{CELL_STYLE}'>{html.escape(c)}</th>" for c in ["step", *cols])
    body = "".join(
        "<tr>"
        + "".join(f"<td style='{CELL_STYLE}'>{c}</td>" for c in [str(row.step), *(number(user.get(m)) for m in cols)])
        + "</tr>"
        for row, user in reversed(latest)
    )
    return f"<table class='rlnb-rl' style='{TABLE_STYLE}'><tr>{head}</tr>{body}</table>"


def visible(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` safe in HTML and readable: control characters as escapes (``\\n``, ``\\x00``), at most
    ``limit`` characters (then an ellipsis), HTML-escaped."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return html.escape(shown) + ("…" if len(text) > limit else "")


def completions_html(rows: list[dict[str, Any]]) -> str:
    """One step's completions: prompt, completion, reward and advantage, in prompt order."""
    headers = ("prompt", "completion", "reward", "adv.")
    head = "".join(f"<th style='{CELL_STYLE};text-align:left'>{h}</th>" for h in headers)
    body = []
    for r in rows[:MAX_COMPLETIONS]:
        cells = (
            f"<code>{visible(str(r['prompt']))}</code>",
            f"<code style='white-space:pre'>{visible(str(r['completion']))}</code>",
            number(r["reward"]),
            number(r["advantage"]),
        )
        body.append("<tr>" + "".join(f"<td style='{CELL_STYLE};text-align:left'>{c}</td>" for c in cells) + "</tr>")
    more = len(rows) - MAX_COMPLETIONS
    if more > 0:
        body.append(f"<tr><td colspan='4'><i>{more} more in history.completions</i></td></tr>")
    return f"<table class='rlnb-completions' style='{TABLE_STYLE}'><tr>{head}</tr>{''.join(body)}</table>"
