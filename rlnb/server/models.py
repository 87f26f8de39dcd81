"""The served base models: their limits, as ``GET /v1/rl/supported-models`` lists them."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlnb import wire

if TYPE_CHECKING:  # the settings check the served models with this module
    from rlnb.server.settings import ServerSettings

log = logging.getLogger("rlnb")

DEFAULT_GPU_TYPE: wire.RequestGpuType = "B200-SXM"
"""The one GPU type SDK 3.1.1 accepts in supported-models (``Literal["B200-SXM"]``) and in a create request."""
SAMPLING_DEFAULTS = wire.SamplingDefaults(logprobs=1, max_tokens=wire.DEFAULT_MAX_TOKENS, n=1, temperature=1.0)


@dataclass(frozen=True)
class ModelInfo:
    context_length: int
    """Longest sequence (prompt + completion) the model takes."""


def model_info(spec: Any, trust_remote_code: bool = False) -> ModelInfo:
    """What supported-models says about a model spec (the one place that reads a model's limits): a
    built-in size, or a Hugging Face folder / cached hub id (its ``config.json``; ``ModelLoadError``
    naming the spec when it cannot be found), or an ``nn.Module`` served from Python (``create_app``), as its
    adapter reads it (supported-models, which a remote session asks when it connects, answers for one too).
    ``trust_remote_code``: the server's, which lets a folder whose config maps classes to its own code be read."""
    from torch import nn

    from rlnb.engine.models import hf
    from rlnb.engine.models.adapter import DEFAULT_CONTEXT, declared_context
    from rlnb.engine.models.tiny import SIZES

    if isinstance(spec, str) and spec in SIZES:
        return ModelInfo(context_length=SIZES[spec].block_size)
    if isinstance(spec, str):
        return ModelInfo(context_length=hf.spec_context_length(spec, trust_remote_code) or DEFAULT_CONTEXT)
    if isinstance(spec, nn.Module):
        return ModelInfo(context_length=declared_context(spec))
    raise ValueError(
        f"a served model is a built-in size ({sorted(SIZES)}), a Hugging Face folder / hub id or an nn.Module, got "
        f"{spec!r}"
    )


TRUST_OPTION = "start rlnb serve with --trust-remote-code (create_app(..., trust_remote_code=True))"
"""How a server is told to run its model folders' own code: what a refusal of such a folder advises."""


def check_served(models: dict[str, Any], trust_remote_code: bool = False) -> None:
    """A ``ValueError`` (``ImportError`` for missing libraries) naming the ``models`` entry no loader can read, so that
    ``create_app`` refuses it as ``rlnb serve --model`` does, before the server answers for it. A folder with code of
    its own is refused unless ``trust_remote_code``, advising the server's option (connect's keyword is no server's)."""
    from rlnb.engine.models.hf import TRUST_ADVICE

    for name, spec in models.items():
        try:
            model_info(spec, trust_remote_code)
        except ImportError as exc:  # its libraries are missing: the message names the pip install
            raise ImportError(f"models[{name!r}]: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"models[{name!r}]: {str(exc).replace(TRUST_ADVICE, TRUST_OPTION)}") from None


def parse_model_option(option: str) -> tuple[str, str]:
    """``NAME=PATH_OR_ID`` (``rlnb serve --model``) as (API name, model spec)."""
    name, sep, spec = option.partition("=")
    if not sep or not name.strip() or not spec.strip():
        raise ValueError(f"--model takes NAME=PATH_OR_ID (e.g. my/qwen=Qwen/Qwen3-0.6B), got {option!r}")
    return name.strip(), spec.strip()


def supported_models(settings: ServerSettings) -> wire.SupportedModels:
    data = []
    for name, spec in settings.models.items():
        try:  # checked when the server started; a folder removed since leaves the other models listed
            n = model_info(spec, settings.trust_remote_code).context_length
        except (ValueError, OSError) as exc:
            log.warning("rlnb serve: supported-models leaves out %s, which cannot be read now: %s", name, exc)
            continue
        config = wire.SupportedComputeConfig(
            gpu_type=DEFAULT_GPU_TYPE,
            generator_config=wire.GeneratorConfig(context_length=n, sampling_defaults=SAMPLING_DEFAULTS),
            trainer_config=wire.TrainerConfig(
                full=wire.FullTrainerConfig(max_batch_size=settings.max_batch_size, max_seq_length=n),
                lora=wire.LoraTrainerConfig(
                    max_batch_size=settings.max_batch_size, max_rank=settings.max_lora_rank, max_seq_length=n
                ),
            ),
        )
        data.append(wire.SupportedModel(base_model=name, default_gpu_type=DEFAULT_GPU_TYPE, compute_configs=[config]))
    return wire.SupportedModels(data=data)
