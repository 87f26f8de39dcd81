"""Which parameters Muon updates and which AdamW updates, decided by each parameter's role.

Muon is defined for hidden weight matrices only. Embeddings, the output head, norms, biases and scalars
go to AdamW, as in every Muon recipe (KJ, Moonlight, torch's docs). The decision must not depend on
the order in which modules register parameters, or on a matrix happening to be vocabulary-wide:
``split_params`` asks the model for its embedding and head (or takes them from the adapter, which
finds them for plain modules) and documents one rule for LoRA factors.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, get_args

from torch import nn

Group: TypeAlias = Literal["muon", "adam"]
"""The optimizer that updates a parameter of a Muon session (as ``muon_split`` names it): another idea than
``wire.OptimizerKind``, spelt alike, since a Muon session's AdamW group is no AdamW session."""
MUON_GROUP: Final = "muon"
ADAM_GROUP: Final = "adam"
GROUPS: tuple[Group, ...] = get_args(Group)


@dataclass
class ParamSplit:
    """Which trainable parameters Muon updates and which AdamW updates, as (name, parameter) pairs."""

    muon: list[tuple[str, nn.Parameter]]
    adam: list[tuple[str, nn.Parameter]]
    stored_in_out: frozenset[str] = frozenset()
    """Muon matrices stored [in, out] (``IN_OUT_LAYERS``: GPT-2's layers) rather than nn.Linear's [out, in]."""

    def fan_shape(self, name: str, p: nn.Parameter) -> tuple[int, int]:
        """A Muon matrix's (fan_out, fan_in), the (rows, cols) of Muon's shape scale: its shape, swapped for one
        stored [in, out]. The scale reads the layer, not its storage: a GPT-2 MLP's c_fc (stored 768 x 3072)
        moved half as far as the same layer as an nn.Linear (3072 x 768), its c_proj twice as far."""
        rows, cols = p.shape
        return (cols, rows) if name in self.stored_in_out else (rows, cols)

    def muon_shapes(self) -> list[tuple[int, int]]:
        """Every Muon matrix's ``fan_shape``, in order."""
        return [self.fan_shape(n, p) for n, p in self.muon]

    def describe(self) -> str:
        """One row per parameter (group, name, shape, size) and a count per group."""
        rows = [(MUON_GROUP, n, p) for n, p in self.muon] + [(ADAM_GROUP, n, p) for n, p in self.adam]
        width = max([len(n) for _, n, _ in rows] + [4])
        lines = [f"{'group':<6} {'name':<{width}} {'shape':<14} {'params':>10}"]
        for g, n, p in rows:
            shape = "x".join(map(str, p.shape)) or "scalar"
            lines.append(f"{g:<6} {n:<{width}} {shape:<14} {p.numel():>10,}")
        for group, members in ((MUON_GROUP, self.muon), (ADAM_GROUP, self.adam)):
            lines.append(f"{group}: {len(members)} tensors, {sum(p.numel() for _, p in members):,} params")
        return "\n".join(lines)

    def as_config(self) -> dict[str, list[str]]:
        """Parameter names per group, as a run's ``config.json`` records them."""
        return {MUON_GROUP: [n for n, _ in self.muon], ADAM_GROUP: [n for n, _ in self.adam]}


IN_OUT_LAYERS = ("Conv1D",)
"""Class names of layers whose weight is stored [in, out]: transformers' ``Conv1D`` (GPT-2's attention and MLP)."""

SplitOverride = Callable[[str, nn.Parameter], "str | None"] | Mapping[str, str]
"""Explicit Muon/AdamW assignment: a function ``(name, param) -> "muon" | "adam" | None`` (None = the
default rule), or ``{glob pattern: "muon" | "adam"}`` matched against parameter names, first match wins."""


def model_roles(model: nn.Module) -> list[nn.Parameter]:
    """Parameters whose role is embedding or output head, as the model itself declares them:
    ``get_input_embeddings()`` / ``get_output_embeddings()`` where it has them (tied weights are one
    parameter, so both roles find it), plus every ``nn.Embedding``."""
    layers: list[nn.Module | None] = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        method = getattr(model, getter, None)
        if callable(method):
            layers.append(method())
    return [p for layer in layers if layer is not None for p in layer.parameters()]


def split_params(
    model: nn.Module, roles: Iterable[nn.Parameter] | None = None, override: SplitOverride | None = None
) -> ParamSplit:
    """Muon gets the 2-D hidden matrices; AdamW gets everything else. Decided by role, never by the order
    in which modules registered their parameters.

    For each trainable parameter (frozen ones belong to neither group), the first rule that applies:

    1. ``override`` answers (a predicate or name patterns, see ``SplitOverride``). Only 2-D goes to Muon.
    2. A LoRA factor (``lora_A`` / ``lora_B``) goes where its layer's base weight would go, so both
       factors of a layer share a group: Muon for a hidden matrix, AdamW for the output head. A factor
       that is not itself a proper matrix (rule 4) goes to AdamW: at rank 1 both are (``[1, in]``,
       ``[out, 1]``), so the pair still shares a group.
    3. Its role is embedding or output head (``roles``; default ``model_roles(model)``) → AdamW: a lookup
       table gets sparse row updates, and the head maps to the vocabulary, not to a hidden space.
    4. Not a proper matrix: not 2-D (norms, biases, scalars), or 2-D with a side of 1 (a value head, a
       gate vector: orthogonalising a single row only normalises it) → AdamW.
    5. Otherwise → Muon.

    A matrix stored [in, out] (``IN_OUT_LAYERS``) is named in ``stored_in_out``: Muon scales its update by the
    layer's (fan_out, fan_in), not by its storage (``ParamSplit.fan_shape``).
    """
    role_ids = {id(p) for p in (model_roles(model) if roles is None else roles)}
    every = dict(model.named_parameters(remove_duplicate=False))

    def group(name: str, p: nn.Parameter) -> Group:
        chosen = _override(override, name, p)
        if chosen is not None:
            if chosen == MUON_GROUP and p.ndim != 2:
                raise ValueError(f"override puts {name} ({tuple(p.shape)}) in Muon, which takes 2-D matrices only")
            return chosen
        for factor in (".lora_A.", ".lora_B."):
            if factor in name:
                base = every.get(name.split(factor)[0] + ".base_layer.weight")
                if base is not None:
                    return ADAM_GROUP if id(base) in role_ids or not (_matrix(base) and _matrix(p)) else MUON_GROUP
        return ADAM_GROUP if id(p) in role_ids or not _matrix(p) else MUON_GROUP

    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    _check_patterns(override, [n for n, _ in named])
    groups = {n: group(n, p) for n, p in named}
    in_out = {id(m.weight) for m in model.modules() if type(m).__name__ in IN_OUT_LAYERS}
    return ParamSplit(
        muon=[(n, p) for n, p in named if groups[n] == MUON_GROUP],
        adam=[(n, p) for n, p in named if groups[n] == ADAM_GROUP],
        stored_in_out=frozenset(n for n, p in named if groups[n] == MUON_GROUP and id(p) in in_out),
    )


def _check_patterns(override: SplitOverride | None, names: list[str]) -> None:
    """``ValueError`` naming a pattern of a ``muon_split`` mapping that matches no trainable parameter, with a few
    names there are: a misspelt one (``"zzz*"``, ``"h.*.mlp"`` for ``"*.mlp.*"``) would be taken and do nothing."""
    if not isinstance(override, Mapping):
        return
    for pattern in override:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            some = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
            raise ValueError(f"muon_split pattern {pattern!r} matches no trainable parameter of the model; its names "
                             f"are like {some or 'none: nothing is trainable'}")  # fmt: skip


def _matrix(p: nn.Parameter) -> bool:
    return p.ndim == 2 and min(p.shape) > 1


def _override(override: SplitOverride | None, name: str, p: nn.Parameter) -> Group | None:
    if override is None:
        return None
    if isinstance(override, Mapping):
        chosen = next((g for pattern, g in override.items() if fnmatch.fnmatchcase(name, pattern)), None)
    else:
        chosen = override(name, p)
    for group in GROUPS:
        if chosen == group:
            return group
    if chosen is not None:
        raise ValueError(f"the Muon/AdamW override must answer 'muon', 'adam' or None; got {chosen!r} for {name}")
    return None
