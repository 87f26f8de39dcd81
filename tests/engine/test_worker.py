"""The worker's own bookkeeping: the envelopes it reports for each status change."""

import sys
import threading

from rlnb import wire
from rlnb.engine.worker import Worker
from rlnb.wire import OperationStatus as Status


def test_each_status_change_is_a_new_envelope_with_the_same_id_and_the_output_at_the_end():
    seen: list[wire.Operation] = []
    done = threading.Event()

    def listener(env: wire.Operation) -> None:
        seen.append(env)
        if env.status == Status.COMPLETED:
            done.set()

    worker = Worker(lambda kind, body, cancelled: {"echo": body}, name="rlnb-test-worker")
    try:
        worker.submit(wire.OperationKind.SAMPLE, 7, listener)
        assert done.wait(30)
    finally:
        worker.close(30)
    assert [env.status for env in seen] == [Status.PENDING, Status.RUNNING, Status.COMPLETED]
    assert len({id(env) for env in seen}) == 3 and len({env.id for env in seen}) == 1
    assert seen[0].output is None and seen[1].output is None and seen[2].output == {"echo": 7}
    assert seen[2].model_fields_set == {"id", "status", "output"}


def test_the_worker_builds_its_envelopes_as_validation_builds_them_without_running_a_validator():
    """The worker's own values (a uuid, a member, the output) are trusted: building each of its three envelopes ran
    ``Newer``'s validator, a Python call a report. What it builds is what validation builds, field for field."""
    from rlnb.wire.base import _newer

    seen: list[wire.Operation] = []
    done = threading.Event()
    validated = [0]

    def count(frame, event, arg):
        if event == "call" and frame.f_code is _newer.__code__:
            validated[0] += 1

    def listener(env: wire.Operation) -> None:
        seen.append(env)
        if env.status == Status.COMPLETED:
            done.set()

    threading.setprofile(count)  # the worker's thread, started now
    try:
        worker = Worker(lambda kind, body, cancelled: {"echo": body}, name="rlnb-test-worker")
    finally:
        threading.setprofile(None)
    try:
        sys.setprofile(count)
        try:
            worker.submit(wire.OperationKind.SAMPLE, 7, listener)
            assert done.wait(30)
        finally:
            sys.setprofile(None)
    finally:
        worker.close(30)
    assert validated[0] == 0 and len(seen) == 3
    for env, given in zip(seen, [{}, {}, {"output": {"echo": 7}}], strict=True):
        made = wire.Operation(id=env.id, status=env.status, **given)
        assert env == made and type(env) is type(made)
        assert env.model_fields_set == made.model_fields_set and env.__pydantic_extra__ == made.__pydantic_extra__
        assert env.to_json_dict() == made.to_json_dict() and env.model_dump_json() == made.model_dump_json()


def test_operation_ids_are_distinct_version_4_uuids_as_uuid4_spells_them():
    """The worker makes its ids from ``os.urandom`` itself, in ``submit`` (``uuid.uuid4`` was three Python calls an
    operation, a function of its own one)."""
    import uuid

    ids: list[str] = []
    worker = Worker(lambda kind, body, cancelled: None, name="rlnb-test-worker")
    try:
        for _ in range(2000):
            worker.submit(
                wire.OperationKind.SAMPLE,
                None,
                lambda env: None if env.status != Status.PENDING else ids.append(env.id),
            )
    finally:
        worker.close(30)
    assert len(set(ids)) == len(ids) == 2000
    for op_id in ids:
        made = uuid.UUID(op_id)
        assert made.version == 4 and made.variant == uuid.RFC_4122 and str(made) == op_id


def test_a_steps_operations_after_a_failed_one_fail_unrun_and_nothing_else_does():
    """``rlnb._one_step``: the rest of the failed step fails unrun with its code; an operation another thread submits
    meanwhile (outside any step), one submitted after the step, and the next step run as ever."""
    from rlnb._one_step import one_step
    from rlnb.errors import OperationError

    ran: list[str] = []
    final: dict[str, wire.Operation] = {}
    done = threading.Event()
    fb, opt = wire.OperationKind.FORWARD_BACKWARD, wire.OperationKind.OPTIM_STEP

    def run(kind, body, cancelled):
        ran.append(body)
        if body == "fb1":
            raise OperationError(wire.OperationErrorCode.RESOURCE_EXHAUSTED, "out of memory")
        return {}

    def listener_for(name: str):
        def listener(env: wire.Operation) -> None:
            if env.status in wire.TERMINAL_STATUSES:
                final[name] = env
                if len(final) == 7:
                    done.set()

        return listener

    worker = Worker(run, name="rlnb-test-worker")
    try:
        with one_step():
            worker.submit(fb, "fb1", listener_for("fb1"))
            other = threading.Thread(target=worker.submit, args=(fb, "other", listener_for("other")))
            other.start()
            other.join(30)
            worker.submit(fb, "fb2", listener_for("fb2"))
            worker.submit(opt, "opt", listener_for("opt"))
        worker.submit(fb, "after", listener_for("after"))
        with one_step():
            worker.submit(fb, "next", listener_for("next"))
            worker.submit(opt, "next opt", listener_for("next opt"))
        assert done.wait(30)
    finally:
        worker.close(30)
    assert ran == ["fb1", "other", "after", "next", "next opt"]
    assert {n for n, env in final.items() if env.status == Status.FAILED} == {"fb1", "fb2", "opt"}
    for name in ("fb2", "opt"):
        assert final[name].error.code == wire.OperationErrorCode.RESOURCE_EXHAUSTED
        assert final[name].error.message.startswith("not run: this step's forward-backward before it failed, nor")


def test_an_exit_says_it_stops_a_running_sample_and_finishes_any_other_operation(monkeypatch, capsys):
    """The exit said ``finishing the running sample`` while the close stops it at its next token (FAILED
    ``SESSION_NOT_ACTIVE``): the line promised a finished sample that never came. A forward-backward does run to its
    end, and says so."""
    from rlnb.errors import Cancelled
    from rlnb.lifecycle import shutdown

    exiting = threading.Event()
    exiting.set()
    started = threading.Event()

    def run(kind, body, cancelled):
        started.set()
        assert cancelled.wait(30), "the close never stopped the operation"
        threading.Event().wait(0.5)  # its last token (or step) takes a while after the stop
        if kind == wire.OperationKind.SAMPLE:
            raise Cancelled()
        return {}

    said = {}
    for kind in (wire.OperationKind.SAMPLE, wire.OperationKind.FORWARD_BACKWARD):
        final: list[wire.Operation] = []
        started.clear()
        worker = Worker(run, name="rlnb-test-worker")
        worker.submit(kind, None, final.append)
        assert started.wait(30)
        monkeypatch.setattr(shutdown, "_EXITING", exiting)  # the close is one of the exit's steps
        assert worker.close()
        monkeypatch.undo()
        said[kind] = (capsys.readouterr().err, final[-1].status)
    assert said[wire.OperationKind.SAMPLE] == (
        "rlnb: stopping the running sample (rlnb-test-worker; it ends at its next token) before exit, up to 60 s; "
        "Ctrl-C to abandon it\n",
        Status.FAILED,
    )
    assert said[wire.OperationKind.FORWARD_BACKWARD] == (
        "rlnb: finishing the running forward-backward (rlnb-test-worker) before exit, up to 60 s; Ctrl-C to abandon "
        "it\n",
        Status.COMPLETED,
    )
