"""Loading Hugging Face causal LMs for the in-process backend, offline first.

A model is named by a local directory (``save_pretrained`` output) or a hub id. A hub id is resolved
to its snapshot in the local Hugging Face cache *before* transformers sees it, so loading never
touches the network (transformers 5.x with peft installed would otherwise send HEAD requests and
retry for ~20 s before failing). Everything that can be wrong with a model is reported here, by name,
before a session exists: not found, no causal-LM head, a tokenizer larger than the embedding table, a
file that cannot be read (a ``ModelLoadError`` naming the folder, never the library's raw error).

A folder that ships its own Python code (``auto_map`` in its ``config.json`` or ``tokenizer_config.json``)
is refused unless ``trust_remote_code=True`` was passed on purpose: transformers would otherwise run that
code, or ask on stdin whether to. Every transformers call here passes ``trust_remote_code`` explicitly.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rlnb._extras import need
from rlnb.engine.dtypes import WEIGHT_DTYPES, check_weight_dtype
from rlnb.engine.oom import out_of_memory

DTYPES = {name: getattr(torch, name) for name in WEIGHT_DTYPES if name != "auto"}
"""``dtype=`` names as torch dtypes; "auto" keeps the checkpoint's dtype (the built-in models: float32)."""


class ModelLoadError(ValueError):
    """The model cannot be used: the message names it and says what to do."""


CODE_FILES = ("config.json", "tokenizer_config.json")
"""Where a folder names its own code (``auto_map``)."""
TRUST_ADVICE = "pass trust_remote_code=True: rlnb.connect('local', model=..., trust_remote_code=True)"
"""How ``check_code``'s refusal says to trust a folder's code (``rlnb serve`` says its own option in its place)."""


def failure_text(exc: BaseException) -> str:
    """A library's error as one short line for a message of ours. Torch's advice to load with
    ``weights_only=False`` is never passed on (that would run whatever code the file holds): only the
    lines that say what torch found are kept. A ``ModelLoadError`` is ours, written to be read whole: never cut."""
    if isinstance(exc, ModelLoadError):
        return f"{type(exc).__name__}: {exc}"
    lines = str(exc).splitlines()
    if any("weights_only" in line for line in lines):
        lines = [line for line in lines if not any(w in line for w in ("weights_only", "Check the documentation"))]
        lines = lines or ["not a file of plain tensors"]
    text = " ".join(" ".join(lines).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def check_code(path: Path, spec: str, trust_remote_code: bool) -> None:
    """Refuse a folder whose ``config.json`` or ``tokenizer_config.json`` maps classes to its own code, unless
    ``trust_remote_code``; a file of these that is not a JSON object is a ``ModelLoadError`` too."""
    for name in CODE_FILES:
        file = path / name
        if not file.is_file():
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            problem = failure_text(exc)
        else:
            if not isinstance(data, dict):
                problem = f"not a JSON object but {type(data).__name__}"
            elif data.get("auto_map") and not trust_remote_code:
                mapped = data["auto_map"]
                names = ", ".join(sorted(map(str, mapped))) if isinstance(mapped, dict) else str(mapped)[:100]
                raise ModelLoadError(
                    f"model {spec!r} ships its own Python code: {file} maps {names} to it (auto_map), and "
                    f"rlnb does not run a model folder's code unless asked. If you trust this folder, {TRUST_ADVICE}"
                )
            else:
                continue
        raise ModelLoadError(f"model {spec!r}: {file} cannot be read ({problem})")


def require_transformers() -> Any:
    return need("transformers", "hf", "a Hugging Face model")


def is_hf_model(model: object) -> bool:
    """A ``transformers`` model object (checked without importing transformers)."""
    return any(c.__module__.startswith("transformers.") for c in type(model).__mro__) and hasattr(model, "config")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
"""A folder holding any of these holds a tokenizer (``tokenizer.save_pretrained`` writes no config.json)."""


def resolve(spec: str, what: str = "model") -> Path:
    """The local directory holding ``spec``: the directory itself, or a hub id's cached snapshot. ``what``: "model"
    (a folder needs its config.json) or "tokenizer" (a folder needs a tokenizer file), the name messages give it."""
    path = Path(spec).expanduser()
    if path.is_file():
        folder = str(path.parent)
        raise ModelLoadError(f"{what} {spec!r} is a file, not a folder: give the folder that holds it, {folder!r}")
    if path.is_dir():
        if what == "model":
            refuse_not_model(path, spec)
        if what == "model" and not (path / "config.json").is_file():
            raise ModelLoadError(f"{spec!r} is a directory but holds no config.json: not a Hugging Face model")
        if what == "tokenizer" and not any((path / f).is_file() for f in TOKENIZER_FILES):
            raise ModelLoadError(f"tokenizer {spec!r} is a directory but holds no tokenizer files "
                                 f"({', '.join(TOKENIZER_FILES)})")  # fmt: skip
        return path
    hub = need("huggingface_hub", "hf", f"{what} {spec!r}, a Hugging Face hub id,")  # a core install lacks it
    snapshot_download = hub.snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    fetch = f"hf download {spec}"
    try:
        found = Path(snapshot_download(spec, local_files_only=True))
    except HFValidationError:
        raise ModelLoadError(
            f"{what} {spec!r} is neither a local directory nor a Hugging Face model id (namespace/name)"
        ) from None
    except (LocalEntryNotFoundError, FileNotFoundError):
        from rlnb.engine.models.tiny import SIZES  # a bare name may be a built-in one mistyped (model="medium")

        builtin = "" if "/" in spec or what != "model" else f"; the built-in models are {', '.join(map(repr, SIZES))}"
        raise ModelLoadError(
            f"{what} {spec!r} is not a local directory and is not in the local Hugging Face cache "
            f"({os.environ.get('HF_HUB_CACHE') or '~/.cache/huggingface/hub'}){builtin}; rlnb loads models "
            f"offline. Fetch it once with:  {fetch}"
        ) from None
    if what == "model":
        refuse_not_model(found, spec)
    return found


def refuse_not_model(path: Path, spec: str) -> None:
    """A ``ModelLoadError`` for a folder that holds something rlnb saved or trains, not a model to load: an inference
    checkpoint (``rlnb.json``: its model is in ``merged/``), or a peft adapter (``adapter_config.json``), alone or
    beside a model's files (both variants of a checkpoint downloaded into one folder), which transformers would attach
    to that model with every base weight frozen: a session would find nothing to train, and LoRA no layer to adapt."""
    if (path / "rlnb.json").is_file() and (path / "merged").is_dir():
        raise ModelLoadError(
            f"model {spec!r} is an rlnb inference checkpoint, not a model folder: give its merged weights, "
            f"{str(path / 'merged')!r}, as the model, or resume from the checkpoint (resume_from=, with its base "
            "model as the model) to go on training it"
        )
    if (path / "adapter_config.json").is_file():
        beside = "beside a model's files" if (path / "config.json").is_file() else "without a model"
        where = "" if Path(spec).expanduser() == path else f" ({path})"  # a hub id's: its snapshot folder
        raise ModelLoadError(
            f"model {spec!r}{where} holds a peft adapter (adapter_config.json) {beside}; rlnb loads a folder whose "
            "weights are the whole model. Give the folder of the base model the adapter was trained on (and resume "
            "from its training checkpoint to go on training it), or a folder of merged weights; if this "
            "folder's model is the one to train, move adapter_config.json and the adapter's weights out of it"
        )


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """No progress bars or info logs while loading (they would fill a notebook cell)."""
    logging = transformers.utils.logging
    bars, level = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def spec_context_length(spec: str, trust_remote_code: bool = False) -> int | None:
    """A model's context length from its ``config.json`` alone (no weights loaded), by folder or hub id."""
    return config_context_length(load_config(resolve(spec), spec, trust_remote_code))


def load_config(path: Path, spec: str, trust_remote_code: bool) -> Any:
    """A model's transformers config from its folder alone (no weights), or ``ModelLoadError`` naming the file."""
    transformers = require_transformers()
    check_code(path, spec, trust_remote_code)
    try:
        with _quiet(transformers):
            return transformers.AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - any library error becomes ours, naming the folder
        problem = failure_text(exc)
    raise ModelLoadError(f"model {spec!r}: {path / 'config.json'} is not a config transformers can load ({problem})")


def load_tokenizer(path: Path, spec: str, trust_remote_code: bool = False) -> Any:
    """The tokenizer saved in the folder ``path``; a ``ModelLoadError`` naming it when it cannot be loaded."""
    transformers = require_transformers()
    check_code(path, spec, trust_remote_code)
    try:
        with _quiet(transformers):
            return transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001
        problem = failure_text(exc)
    raise ModelLoadError(f"tokenizer {spec!r}: its files in {path} cannot be loaded ({problem})")


def load(spec: str, dtype: str = "auto", trust_remote_code: bool = False) -> tuple[nn.Module, Any]:
    """(model, tokenizer or None) for a directory or cached hub id; ``dtype`` "auto" = the checkpoint's."""
    check_weight_dtype(dtype)
    path = resolve(spec)
    model = load_weights(path, spec, DTYPES.get(dtype, "auto"), trust_remote_code)
    tokenizer = None
    if any((path / f).is_file() for f in TOKENIZER_FILES):
        tokenizer = load_tokenizer(path, spec, trust_remote_code)
    return model, tokenizer


def load_weights(path: Path, spec: str, dtype: torch.dtype | str, trust_remote_code: bool) -> nn.Module:
    """The causal LM saved in the folder ``path`` (named ``spec`` in messages), in ``dtype`` ("auto": the
    checkpoint's), every weight of it read from the folder: one it lacks (transformers would make it up, random)
    or whose shape differs from the config's is a ``ModelLoadError`` naming it. Also reloads a merged checkpoint."""
    transformers = require_transformers()
    config = load_config(path, spec, trust_remote_code)
    arch = getattr(config, "architectures", None) or [type(config).__name__]
    problem, headless = "", False
    with _quiet(transformers):
        try:
            model, info = transformers.AutoModelForCausalLM.from_pretrained(
                path, dtype=dtype, output_loading_info=True, trust_remote_code=trust_remote_code
            )
        except Exception as exc:  # noqa: BLE001 - OSError, SafetensorError, TypeError, ...: ours, naming the folder
            if out_of_memory(exc):  # no fault of the folder: the session's build says memory ran out
                raise
            problem, headless = failure_text(exc), "Unrecognized configuration class" in str(exc)
    if headless:
        raise ModelLoadError(
            f"model {spec!r} ({', '.join(arch)}) has no causal-LM head: rlnb trains AutoModelForCausalLM models"
        )
    if "ignore_mismatched_sizes" in problem:  # transformers points to a report its logging level hid: say it here
        _refuse_mismatch(transformers, path, spec, trust_remote_code)
    if problem:
        raise ModelLoadError(f"model {spec!r}: the weights in {path} cannot be loaded ({problem})")
    head = model.get_output_embeddings()
    head_names = {n for n, p in model.named_parameters() if head is not None and any(p is q for q in head.parameters())}
    if head is None or head_names & set(info.get("missing_keys", ())):
        raise ModelLoadError(
            f"model {spec!r} has no trained causal-LM head: the checkpoint ({', '.join(arch)}) lacks "
            f"{', '.join(sorted(head_names)) or 'an output layer'}, so its logits would come from random weights"
        )
    missing = sorted(set(info.get("missing_keys", ())))
    if missing:
        raise ModelLoadError(
            f"model {spec!r}: the checkpoint in {path} lacks {len(missing)} of the model's weights "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): they would be random, trained as if "
            "they were the model's. A shard or file of the weights may be missing"
        )
    unexpected = sorted(set(info.get("unexpected_keys", ())))  # what transformers knows to be harmless is not here
    if unexpected:
        raise ModelLoadError(
            f"model {spec!r}: the checkpoint in {path} holds {len(unexpected)} weights the model it describes has no "
            f"place for ({', '.join(unexpected[:3])}{', ...' if len(unexpected) > 3 else ''}): they would be dropped, "
            "and a smaller model trained. config.json may not match the weights (fewer layers, another architecture)"
        )
    return model


def _refuse_mismatch(transformers: Any, path: Path, spec: str, trust_remote_code: bool) -> None:
    """A ``ModelLoadError`` naming the weights whose shapes differ from the config's (a second load, that
    allows them, lists them); nothing if that load fails too or finds none (the caller's error stands). It unties
    the head: a folder holding both tied weights (a merged checkpoint) failed it comparing them as meta tensors."""
    try:
        with _quiet(transformers):
            _, info = transformers.AutoModelForCausalLM.from_pretrained(
                path, ignore_mismatched_sizes=True, output_loading_info=True, trust_remote_code=trust_remote_code,
                tie_word_embeddings=False,
            )  # fmt: skip
    except Exception:  # noqa: BLE001
        return
    keys = sorted(info.get("mismatched_keys", ()), key=lambda k: k[0])
    if keys:
        shapes = [f"{k} is {list(ckpt)} in the checkpoint but {list(want)} by the config" for k, ckpt, want in keys[:3]]
        raise ModelLoadError(f"model {spec!r}: {path / 'config.json'} does not match its weights: {'; '.join(shapes)}")


def check_vocab(rows: int, tokenizer: Any, name: str) -> None:
    """A tokenizer may be smaller than the model's vocabulary of ``rows`` (padded vocabularies), never larger."""
    size = len(tokenizer) if tokenizer is not None and hasattr(tokenizer, "__len__") else 0
    if size > rows:
        raise ModelLoadError(
            f"tokenizer of {name!r} has {size} tokens but the model's embedding table has {rows} rows: "
            "they do not belong together (ids past the table would crash training)"
        )


def context_length(model: nn.Module) -> int | None:
    return config_context_length(getattr(model, "config", None))


def config_context_length(config: Any) -> int | None:
    """The longest sequence a model's config allows (its position table), or None if it does not say."""
    for attr in ("max_position_embeddings", "n_positions", "block_size"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
