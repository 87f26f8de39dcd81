"""A task's prompts checked as a session not yet opened will read them: ``lr_find`` without a session, a builder's
Find LR with no RunPanel, and a sweep's trials. On a Hugging Face model or a remote ``target=`` a prompt it cannot read
(text for a model without a tokenizer, an id past the vocabulary, one past the context, a lone surrogate) would fail
the range test's first step, after the model is loaded or a remote session started (billed) for it, and each sweep
trial's first step, after other trials have run for minutes."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from rlnb._input.checks import check_bool
from rlnb.history.runconfig import LOCAL
from rlnb.tasks.task import Task, task_prompt_ids
from rlnb.text.codec import ByteCodec, Codec, NoTokenizerCodec, TokenizerCodec
from rlnb.text.prompts import tokenizer_spec

from .options import given


def check_new_session_prompts(task: Task, target: str, options: Mapping[str, Any]) -> None:
    """``ValueError`` / ``TypeError`` naming the prompt (``task 'x': prompts[i]``) that a new session of ``target``
    with ``options`` (``rlnb.connect``'s) cannot read, as far as its codec, vocabulary and context are known before
    it opens: a built-in model's; a Hugging Face folder or cached hub id's tokenizer (or ``tokenizer=``) and its
    config's vocabulary and context; a remote ``base_model``'s codec (``tokenizer=``, rlnb serve's byte-level
    ``rlnb/...`` models, else no tokenizer: token ids only, as ``connect`` makes it), and an ``rlnb/...`` model's
    vocabulary and context (another's are the service's). A module, or a remote session whose model the service picks
    (no ``base_model``, ``model_resources_id=``, ``session_id=``), is known once open: its first step refuses such a
    prompt."""
    from rlnb.engine.models import hf
    from rlnb.engine.models.tiny import SIZES

    trust = check_bool("trust_remote_code", given(options, "trust_remote_code", False))  # as connect checks it
    tokenizer = tokenizer_spec(given(options, "tokenizer", None))
    if target == LOCAL:
        model = given(options, "model", "tiny")
        if not isinstance(model, str) or not model.strip():  # a module (or a bad model=, which connect names)
            return
        if model in SIZES:
            codec = _codec(tokenizer, trust) if tokenizer is not None else ByteCodec()
            task_prompt_ids(task, codec, SIZES[model].vocab_size, SIZES[model].block_size)
            return
        if importlib.util.find_spec("transformers") is None:  # the session's open says what to install
            return
        folder = hf.resolve(model)  # not there: the error connect would give, before anything loads
        if tokenizer is None and any((folder / name).is_file() for name in hf.TOKENIZER_FILES):
            tokenizer = hf.load_tokenizer(folder, model, trust)
        codec = _codec(tokenizer, trust) if tokenizer is not None else NoTokenizerCodec(model)
        config = hf.load_config(folder, model, trust)  # its config alone (no weights): vocabulary and context
        task_prompt_ids(task, codec, _vocab(config), hf.config_context_length(config))
        return
    base = given(options, "base_model", None)
    if tokenizer is not None:
        codec = _codec(tokenizer, trust)
    elif not isinstance(base, str) or given(options, "session_id", None) or given(options, "model_resources_id", None):
        return  # which model (and so which codec) the service picks: known once the session is open
    else:
        codec = ByteCodec() if base.startswith("rlnb/") else NoTokenizerCodec(base)
    builtin = SIZES.get(base.removeprefix("rlnb/")) if isinstance(base, str) and base.startswith("rlnb/") else None
    if builtin is None:  # another service's model: its vocabulary and context are known once the session is open
        task_prompt_ids(task, codec, None, None)
    else:
        task_prompt_ids(task, codec, builtin.vocab_size, builtin.block_size)


def check_sweep_prompts(task: Task, target: str, options: Mapping[str, Any], ray: bool) -> None:
    """``check_new_session_prompts`` for a sweep's trials, once, before its folder is made (a prompt they cannot read
    failed each trial at its first step, after the others had run for minutes). On Ray (``ray``) a Hugging Face model
    that cannot be loaded here may be on the workers: its trials load and check it there."""
    from rlnb.engine.models.hf import ModelLoadError

    try:
        check_new_session_prompts(task, target, options)
    except ModelLoadError:
        if not ray:
            raise


def _vocab(config: Any) -> int | None:
    """The vocabulary of a Hugging Face config (its text model's), None where it does not say."""
    text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
    vocab = getattr(text, "vocab_size", None)
    return vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None


def _codec(tokenizer: Any, trust: bool) -> Codec:
    """``tokenizer=`` (an object, a folder or a cached hub id) as the codec ``connect`` makes of it."""
    if isinstance(tokenizer, str):
        from rlnb.engine.model_setup import load_tokenizer

        tokenizer = load_tokenizer(tokenizer, trust)
    return TokenizerCodec(tokenizer)
