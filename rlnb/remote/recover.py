"""Creating a model resource or a session when its answer may be lost: ``create_once``.

Together's API takes no Idempotency-Key on ``POST /model-resources`` or ``POST /training-sessions``, so
resending one whose answer was lost after the server acted (a dropped connection, a proxy's timeout or 502)
creates a second object: an orphaned resource that holds reserved GPUs until its ``inactive_timeout``, or
a 429 because the first session already took the resource's one session slot. So a create is sent once
as soon as it may have reached the server (``Call.idempotent``: retried only when no connection was made,
or on 408 / 409 / 429, which refuse it), and when its answer is lost rlnb lists the active objects this
user created since it was sent, on the server's clock, and adopts the one that matches the request; those
this process's other creates got (a sweep's concurrent trials: ``claims``) are not candidates. Two matches
(another create of the same thing in the same seconds, elsewhere) cannot be told apart: the error names both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from rlnb import wire
from rlnb._input.shown import printable
from rlnb.errors import APIError, RlnbError, may_have_acted
from rlnb.remote.claims import CLAIMS
from rlnb.remote.client import APIClient

log = logging.getLogger("rlnb")

T = TypeVar("T", wire.ModelResources, wire.Session)

SLACK = 2.0
"""Seconds before the create's send that still count as "since": the server's ``Date`` has whole seconds."""
MAX_PAGES = 10
"""Pages of 100 listed at most when looking for a lost create (active objects of one user)."""


def create_once(
    create: Callable[[], T],
    find: Callable[[float], list[T]],
    client: APIClient,
    what: str,
    lister: str,
    adopt: Callable[[T], None],
) -> T:
    """``create()``; when its answer is lost, the one object ``find(since)`` lists (``since``: when it was
    sent, on the server's clock), or the original error when there is none, with a note that the server may have
    created it all the same, or may still (a slow server acts after the call's deadline), and how to find it
    (``lister``: the ``APIClient`` method): a bare timeout would leave a paid resource running, unnamed. Ctrl-C while
    it is answered is raised as it is, once the one object ``find`` lists is handed to ``adopt`` (the caller's
    clean-up stops it): the server may have acted already, and what it made would run on, named nowhere."""
    sent = time.time()
    try:
        with CLAIMS.sending():
            made = create()
            CLAIMS.claim(made.id)
            return made
    except APIError as exc:
        if not may_have_acted(exc):
            raise
        lost = exc
    except KeyboardInterrupt as exc:
        _interrupted(find, client.server_time(sent) - SLACK, exc, client, (what, lister), adopt)
        raise
    said = printable(lost)  # what a server sends (its message, ids) is said with its control characters escaped
    listed = _listed(find, client.server_time(sent) - SLACK, f"the answer to creating {what} was lost ({said}), and "
                     "listing failed too")  # fmt: skip
    found, others = CLAIMS.split(listed, time.monotonic() + client.deadline)  # a sweep's other trials' are not its
    if len(found) == 1:
        log.warning("the answer to creating %s was lost (%s); found it by listing: %s", what, said, _ids(found))
        CLAIMS.claim(found[0].id)
        return found[0]
    if found:
        raise RlnbError(
            f"the answer to creating {what} was lost ({said}), and {len(found)} matching ones were created since "
            f"it was sent: {_ids(found)}{_theirs(others)}. rlnb cannot tell which is its own: stop those you do not "
            "use"
        ) from lost
    if lost.answer_id is not None:  # the answer came, unreadable: its id names what was made
        named = printable(lost.answer_id)
        lost.add_note(f"(the server created {what} {named}, in an answer rlnb could not read, and rlnb stopped "
                      f"nothing: stop it yourself; {_look_for(client, lister)})")  # fmt: skip
        raise lost
    lost.add_note(
        f"(the server may have created {what} all the same, or may still, and rlnb cannot stop what it cannot name: "
        f"{_look_for(client, lister)})"
    )
    raise lost


def _interrupted(
    find: Callable[[float], list[T]],
    since: float,
    exc: KeyboardInterrupt,
    client: APIClient,
    names: tuple[str, str],
    adopt: Callable[[T], None],
) -> None:
    """The object an interrupted create made (``find(since)``), handed to ``adopt``; else a note on ``exc`` saying
    where to look (``names``: what was created, and the ``APIClient`` method that lists it). Another Ctrl-C ends
    the search."""
    what, lister = names
    log.warning("interrupted while creating %s: looking for it, to stop it (Ctrl-C again to leave it)", what)
    found, _ = CLAIMS.split(_listed(find, since, "could not list what was created"), time.monotonic())
    if len(found) == 1:
        log.warning("the server made %s all the same (%s): it is stopped with the rest", what, _ids(found))
        CLAIMS.claim(found[0].id)
        adopt(found[0])
        return
    made = f"made {_ids(found)}" if found else f"may have created {what} all the same"
    exc.add_note(f"(interrupted while creating {what}: the server {made}, and rlnb stopped nothing: "
                 f"{_look_for(client, lister)})")  # fmt: skip


def _listed(find: Callable[[float], list[T]], since: float, failed: str) -> list[T]:
    """``find(since)``, or none (``failed``, and why, logged) when listing fails too."""
    try:
        return find(since)
    except APIError as exc:
        log.warning("%s: %s", failed, printable(exc))
        return []


def _ids(found: list[T]) -> str:
    """The ids a server listed, as rlnb says them: its control characters escaped (``printable``)."""
    return ", ".join(printable(obj.id) for obj in found)


def _theirs(others: list[T]) -> str:
    """The matching ones this process's other creates got, said as not the lost create's."""
    if not others:
        return ""
    if len(others) == 1:
        return f" ({_ids(others)}, which another create of this process got (a sweep's other trial), is not one)"
    return f" ({_ids(others)}, which other creates of this process got (a sweep's other trials), are not among them)"


def _look_for(client: APIClient, lister: str) -> str:
    """Where a user finds what rlnb could not name (``lister``: the ``APIClient`` method that lists it)."""
    return f"look for it with rlnb.remote.client.APIClient({client.base_url!r}).{lister}(created_by='me'), and stop it"


def _pages(fetch: Callable[[str | None], wire.ModelResourcesList | wire.SessionList]) -> Iterator[Any]:
    """Every object of up to ``MAX_PAGES`` pages (each of the one type its ``fetch`` lists)."""
    after = None
    for _ in range(MAX_PAGES):
        page = fetch(after)
        yield from page.data
        if not (page.meta.has_more and page.meta.next_cursor):
            return
        after = page.meta.next_cursor


def resources_since(
    client: APIClient, request: wire.CreateModelResourcesRequest
) -> Callable[[float], list[wire.ModelResources]]:
    """``find`` for ``create_once``: this user's active resources created since, as ``request`` asks."""
    replicas = request.compute_config.num_generator_replicas if request.compute_config else None
    optimizer = wire.optimizer_of(request.optimizer_config) if request.optimizer_config else None

    def matches(r: wire.ModelResources) -> bool:
        return (
            r.base_model == request.base_model
            and request.lora_enabled in (None, r.lora_enabled)
            and optimizer in (None, wire.optimizer_of(r.optimizer_config))
            and replicas in (None, r.compute_config.num_generator_replicas)
        )

    def find(since: float) -> list[wire.ModelResources]:
        fetch = lambda after: client.list_model_resources(  # noqa: E731
            status=wire.RESOURCE_ACTIVE, created_by="me", after=after
        )
        return [r for r in _pages(fetch) if r.created_at.timestamp() >= since and matches(r)]

    return find


def sessions_since(
    client: APIClient, request: wire.StartTrainingSessionRequest
) -> Callable[[float], list[wire.Session]]:
    """``find`` for ``create_once``: this user's active sessions on the resource created since, as asked."""

    def matches(s: wire.Session) -> bool:
        """``""`` is no value on either side: a service may write an unset string so (proto3 JSON with defaults)."""
        return (s.display_name or None, s.resume_from_checkpoint_id or None) == (
            request.display_name or None,
            request.resume_from_checkpoint_id or None,
        )

    def find(since: float) -> list[wire.Session]:
        fetch = lambda after: client.list_sessions(  # noqa: E731
            model_resources_id=request.model_resources_id, status=wire.SESSION_ACTIVE, created_by="me", after=after
        )
        return [s for s in _pages(fetch) if s.created_at.timestamp() >= since and matches(s)]

    return find
