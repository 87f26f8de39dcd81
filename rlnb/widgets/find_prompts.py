"""Find LR's task prompts checked at the click, as the range test's session will read them: a prompt it cannot read
would fail the test's first step, after the panel's session is copied (on a remote service: a checkpoint saved, a new
session started)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb.history.runconfig import LOCAL
from rlnb.sweep.new_prompts import check_new_session_prompts
from rlnb.sweep.options import given
from rlnb.tasks import Task, digits_task
from rlnb.tasks.task import session_prompt_ids


def check_task_prompts(options: Mapping[str, Any], session: Any, model: Any) -> None:
    """``ValueError`` / ``TypeError`` naming the prompt (``task 'x': prompts[i]``) that the test of ``options`` on a
    copy of ``session`` (None: a new session of ``model``) cannot read, where that is known before anything opens: the
    session's codec, vocabulary and context (unless ``options`` give another tokenizer), or a new session's
    (``check_new_session_prompts``: a built-in or Hugging Face model, a remote ``base_model``). A step_fn of the
    person's reads no task; a reward function is used with the digits task's prompts."""
    if options.get("step_fn") is not None:
        return
    task = options.get("task")
    task = task if isinstance(task, Task) else digits_task()
    if session is None:
        check_new_session_prompts(task, options.get("target", LOCAL), {"model": model, **options})
    elif given(options, "tokenizer", None) is None:
        session_prompt_ids(task, session)
