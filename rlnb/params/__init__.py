"""Optimizer configs for ``optim-step``: ``AdamParams`` and ``MuonParams``.

Modules: ``classes`` (the params classes a notebook builds), ``fields`` (a field's rule in words, the numbers taken),
``hyperparams`` (what an optimizer steps with: the defaults filled in, ``resolve``, ``check_hyperparams``),
``schedule`` (a learning rate over steps: ``Schedule`` turns a base rate into the rate for step ``n``).

They reuse the field definitions (and bounds) of ``rlnb.wire`` and add what a notebook needs:
unknown fields rejected, a ``ValueError`` that names the field, the value and the allowed range,
``request_body()`` (the exact JSON sent) and ``resolved()`` (the values the local backend uses).

Params are checked once, when they are built (``AdamParams(...)``, or the server parsing a body).
Resolving them (``resolved()``, ``resolve(optimizer, body)``) fills in the defaults and gives a frozen
``AdamHyperparams`` / ``MuonHyperparams``: what the optimizers' ``step`` takes, with nothing left to check.

Unset is not zero: ``grad_clip_norm=0`` turns clipping *off*, while an unset ``grad_clip_norm``
(or ``None``) means the session default 1.0. Unset fields are therefore omitted from the body, never
sent as 0.

Defaults the local backend applies to unset fields (``resolved()``):

============  ==================  ========================================================
optimizer     field               default
============  ==================  ========================================================
Adam          learning_rate       1e-4
Adam          beta1, beta2        0.9, 0.95
Adam          eps                 1e-8
Adam          weight_decay        0.1
Adam          grad_clip_norm      1.0 (0 = off)
Muon          learning_rate       0.02 (spectral-norm units, "original" scaling)
Muon          momentum            0.95 (Nesterov)
Muon          newton_schulz_steps 5
Muon          weight_decay        0
Muon          grad_clip_norm      1.0 (0 = off)
Muon.adam     (non-matrix params) the Adam defaults above
============  ==================  ========================================================
"""

from rlnb.errors import GRADIENTS_KEPT, SUBMIT_AGAIN  # a refused optim-step's words, public here too

from .classes import (
    ADAM_FIELDS,
    MUON_ADAM_FIELDS,
    MUON_FIELDS,
    PARAMS,
    AdamParams,
    MuonParams,
    OptimizerParams,
    kind_of,
    params_for,
    params_state,
)
from .hyperparams import (
    ADAM_DEFAULTS,
    DECAY_RULE,
    HYPERPARAMS,
    MUON_DEFAULTS,
    AdamHyperparams,
    Hyperparams,
    MuonHyperparams,
    check_adam_clip,
    check_decay,
    check_hyperparams,
    decay_rule_holds,
    resolve,
)

__all__ = [
    "ADAM_DEFAULTS",
    "ADAM_FIELDS",
    "DECAY_RULE",
    "GRADIENTS_KEPT",
    "SUBMIT_AGAIN",
    "HYPERPARAMS",
    "MUON_ADAM_FIELDS",
    "MUON_DEFAULTS",
    "MUON_FIELDS",
    "PARAMS",
    "AdamHyperparams",
    "AdamParams",
    "Hyperparams",
    "MuonHyperparams",
    "MuonParams",
    "OptimizerParams",
    "check_adam_clip",
    "check_decay",
    "check_hyperparams",
    "decay_rule_holds",
    "kind_of",
    "params_for",
    "params_state",
    "resolve",
]
