"""The worker's own bookkeeping: the envelopes it reports for each status change."""

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
