"""Optimizer presets for the builder, each with the lesson it teaches on the demo task.

Measured on the built-in model and the digits task (seeds 0-2, 30 RL steps; figures in docs/widgets.md,
held by ``tests/widgets/test_widgets.py::test_presets_hold_their_lessons``) with wide margins, so that a change
of sampler or model size does not flip a lesson.
"""

from __future__ import annotations

from typing import Any

from rlnb.params import ADAM_FIELDS, MUON_FIELDS


def _preset(adam: tuple[float, float, float, float, float, float], muon: tuple[float, float, int, float, float]) -> Any:
    """One preset: the same AdamW values for an Adam session and for Muon's non-matrix weights."""
    adam_values = dict(zip(ADAM_FIELDS, adam, strict=True))
    return {"adam": adam_values, "muon": dict(zip(MUON_FIELDS, muon, strict=True)), "muon.adam": dict(adam_values)}


DEFAULT_PRESET = "Learns in 30 steps"
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # Sized for the built-in model and the digits task: AdamW 1e-2 (Muon 0.05 on the matrices), clip 1.
    DEFAULT_PRESET: _preset((1e-2, 0.9, 0.95, 1e-8, 0.0, 1.0), (0.05, 0.95, 5, 0.0, 1.0)),
    # The values in Together's optim-step reference example (lr, beta1, beta2, eps, wd, clip).
    "Together docs": _preset((1e-4, 0.9, 0.95, 1e-8, 0.1, 10.0), (0.02, 0.95, 5, 0.0, 10.0)),
    # KellerJordan/Muon: SingleDeviceMuonWithAuxAdam defaults (Muon lr 0.02, momentum 0.95, wd 0; aux
    # AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-10, wd 0). KJ does not clip: 0 = off.
    "Keller Jordan Muon": _preset((3e-4, 0.9, 0.95, 1e-10, 0.0, 0.0), (0.02, 0.95, 5, 0.0, 0.0)),
    # For teaching: ~10,000x the rates that learn, clipping off. Lower "too high" rates (0.5-10) often
    # collapse the policy onto digits, the best possible reward on this task, and teach the opposite.
    "Too high (teaching)": _preset((100.0, 0.9, 0.95, 1e-8, 0.0, 0.0), (50.0, 0.95, 5, 0.0, 0.0)),
}
"""Optimizer values per preset and optimizer kind (``{name: {"adam": {...}, "muon": {...}}}``);
``LESSONS`` says what each teaches."""
LESSONS: dict[str, str] = {
    DEFAULT_PRESET: "expect the reward to climb from ~0.05 to near 1 within 30 steps on the digits task",
    "Together docs": "the API reference's values, sized for large models: on this tiny model the reward "
    "barely moves in 30 steps (lr 1e-4 is too small here)",
    "Keller Jordan Muon": "Muon's own defaults: the matrices learn, but AdamW at 3e-4 holds the embeddings and "
    "head back, so the reward barely moves in 30 steps here",
    "Too high (teaching)": "far too high, clipping off: within a step or two the policy collapses onto one "
    "output and the reward falls to ~0 and stays there",
}
"""What a run with each preset does (measured on the built-in model, see docs/widgets.md), shown beside it."""
