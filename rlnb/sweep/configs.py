"""The configs a sweep is given (a list of dicts, and ``variants``, one name each): read once, each spelt as flat
fields, checked before the sweep folder is made — none twice in what it sends."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from rlnb._scalars import scalar
from rlnb.params import OptimizerParams
from rlnb.text.prompts import check_text

from .applying import applied, meant
from .space import MAX_CONFIGS, check_fields


def config_list(configs: Any) -> list[dict[str, Any]] | None:
    """``sweep``'s ``configs`` as a list of at most ``MAX_CONFIGS`` dicts, read once: else a generator would run
    its trials and be recorded in ``sweep.json`` as ``[]`` (read again, empty), and one dict, or a list holding a
    name, would be dict()'s "dictionary update sequence element #0 has length 1". Each config as ``flat_config`` spells
    it."""
    if configs is None:
        return None
    if isinstance(configs, Mapping | str | bytes) or not isinstance(configs, Iterable):
        raise TypeError(
            f"configs must be a list of dicts, such as grid(learning_rate=[1e-3, 1e-2]), got "
            f"{configs!r}{' (one config: put it in a list)' if isinstance(configs, Mapping) else ''}"
        )
    listed = list(
        itertools.islice(configs, MAX_CONFIGS + 1)
    )  # an endless generator would be read until memory runs out
    if len(listed) > MAX_CONFIGS:
        raise ValueError(
            f"configs holds more than {MAX_CONFIGS} configs: at most {MAX_CONFIGS}, each a trial per seed, as grid() "
            "and random_search() make (a list of 10,001 ran them all)"
        )
    for i, config in enumerate(listed):
        if not isinstance(config, Mapping):
            raise TypeError(f"configs[{i}] must be a dict of fields, such as {{'learning_rate': 1e-3}}, got {config!r}")
    return [flat_config(f"configs[{i}]", c) for i, c in enumerate(listed)]


def check_variants(variants: Any, configs: list[dict[str, Any]] | None) -> list[str] | None:
    """``sweep``'s ``variants``: one distinct name per config of a list (``ablate``'s), or None."""
    if variants is None:
        return None
    if configs is None:
        raise ValueError("variants names the configs one by one: pass configs (a list of dicts) with it")
    if isinstance(variants, Mapping | str | bytes) or not isinstance(variants, Iterable):
        raise TypeError(f"variants must be a list of names, one per config, got {variants!r}"[:300])
    if isinstance(variants, AbstractSet):  # each config took whichever name the hash seed put in its place
        raise TypeError(f"variants must be a list of names, one per config (a set has no order to pair them with the "
                        f"configs), got {variants!r}"[:300])  # fmt: skip
    names = list(variants)
    if len(names) != len(configs) or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"variants must be {len(configs)} distinct names (non-empty strings), one per config, got "
                         f"{names!r}"[:300])  # fmt: skip
    for i, name in enumerate(names):  # the table's text column refused it once the sweep had run, its folder made
        check_text(name, f"variants[{i}] ({name!r})")
    return names


def flat_config(where: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with a nested group spelt as its dotted fields (``{"adam": {"learning_rate": 1e-3}}`` is
    ``{"adam.learning_rate": 1e-3}``: its dict in a table column was unhashable to ``summarize``), each value a plain
    number (``np.float32`` went to JSON files as "0.001"). A field that is no text is refused naming ``where``
    (``{5: 0.1}`` was an ``AttributeError`` from deep in ``apply``), and so is one given in both spellings (one value
    was dropped without a word)."""
    check_fields(where, [key for key in config if not isinstance(key, str)])
    out: dict[str, Any] = {}
    for key, value in config.items():
        spelt = {f"{key}.{sub}": v for sub, v in value.items()} if isinstance(value, Mapping) else {key: value}
        for field, v in spelt.items():
            if field in out:
                group = field.partition(".")[0]
                raise ValueError(f"{where} gives {field} twice: as {field!r} and in {group!r}; give it once")
            out[field] = scalar(v)
    return out


def check_distinct_params(base: OptimizerParams, configs: Sequence[Mapping[str, Any]]) -> None:
    """``ValueError`` naming two configs that send the same params: ``{}`` and ``{"learning_rate": 1e-3}`` on a base
    at 1e-3 would run one trial twice under two labels, which ``check_once`` misses. Compared as sent
    (``request_body``): an unset field is the target's default, which a remote service may choose otherwise."""
    seen: dict[str, tuple[int, str]] = {}
    for i, config in enumerate(configs):
        body = applied(f"configs[{i}]", base, config).request_body()
        sent = json.dumps(body, sort_keys=True)
        j, first = seen.setdefault(json.dumps(meant(body), sort_keys=True), (i, sent))
        if j != i:  # an empty group ({"adam": {}}) sets nothing: the same params as none
            said = f"({sent})" if sent == first else f"({first} and {sent}: an empty group sets nothing)"
            raise ValueError(f"configs[{j}] {dict(configs[j])!r} and configs[{i}] {dict(config)!r} send the same "
                             f"params {said}: the same trial would run twice; drop one")  # fmt: skip
