"""How many items an operation body's lists and objects hold, checked on its decoded JSON before its model is
validated: a 400 naming the field and the limit. Validation of a body holds the GIL, and pydantic built an error per
bad item before the first was read: 1,000,000 ``{}`` samples (8 MB) took 2.1 GB and 7 s of CPU, and every other
client waited. Within these counts a body's errors stay few (the wire's lists stop at their first bad item)."""

from __future__ import annotations

from typing import Any

from rlnb import wire
from rlnb.server.errors import ServerError
from rlnb.server.settings import ServerSettings


def batch_limit(settings: ServerSettings, param: str, n: int, what: str = "entries") -> ServerError:
    """The 400 for a list of ``n`` samples (or gradients, one per sample) past ``max_batch_size``."""
    return ServerError(
        400,
        f"{param} has {n} {what}; the limit is {settings.max_batch_size} per request (max_batch_size in "
        "supported-models): split the batch",
        param=param,
    )


def max_prompts(settings: ServerSettings) -> int:
    """The most prompts a sample may hold: each asks at least one token of ``max_sample_tokens``, and caches at least
    one of ``max_sample_prompt_tokens`` (``limits.check_sample``)."""
    return min(settings.max_sample_tokens, settings.max_sample_prompt_tokens)


def check_counts(settings: ServerSettings, model: Any, data: Any, prefix: str = "") -> None:
    """The counts of ``data`` (decoded JSON), a body of ``model``'s (a request type; anything else has none):
    ``samples`` and ``gradients`` up to ``max_batch_size``, ``model_inputs`` up to ``max_prompts``, and each sample's
    ``loss_fn_inputs`` up to the inputs a loss reads. ``prefix``: where the body lies (``payload.`` for an upload)."""
    fields = getattr(model, "model_fields", {})
    if not isinstance(data, dict):
        return
    for name in ("samples", "gradients"):
        items = data.get(name) if name in fields else None
        if isinstance(items, list) and len(items) > settings.max_batch_size:
            raise batch_limit(settings, prefix + name, len(items))
    prompts = data.get("model_inputs") if "model_inputs" in fields else None
    if isinstance(prompts, list) and len(prompts) > max_prompts(settings):
        raise ServerError(
            400, f"{prefix}model_inputs has {len(prompts)} prompts; the limit is {max_prompts(settings)} per request "
            f"(each prompt asks at least one token of max_sample_tokens {settings.max_sample_tokens} and caches one "
            f"of max_sample_prompt_tokens {settings.max_sample_prompt_tokens}): split it",
            param=f"{prefix}model_inputs",
        )  # fmt: skip
    samples = data.get("samples") if "samples" in fields else None
    keys = len(wire.LOSS_INPUT_DTYPES)
    for i, sample in enumerate(samples if isinstance(samples, list) else ()):
        inputs = sample.get("loss_fn_inputs") if isinstance(sample, dict) else None
        if isinstance(inputs, dict) and len(inputs) > keys:
            param = f"{prefix}samples.{i}.loss_fn_inputs"
            names = ", ".join(wire.LOSS_INPUT_DTYPES)
            said = f"{param} has {len(inputs)} keys; a loss reads at most {keys} (of {names})"
            raise ServerError(400, said, param=param)
