"""A ``step_fn`` that waits for the test's word before each real step (``Gate``), and the widget helpers the mid-run
tests share (tests/widgets/test_mid_run.py, test_form_entries.py): a test module imports no other test module."""

import contextlib
import re
import threading
import time

import rlnb

DEADLINE = 60.0


def text(widget) -> str:
    """A widget's HTML value as the words a person reads."""
    return re.sub(r"<[^>]+>", "", widget.value)


def wait_for(what, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < end, "not reached before the deadline"
        time.sleep(0.01)


class Gate:
    """A ``step_fn``: keeps the params it is called with (fixed before it is called), waits for ``release()``,
    then trains one real step with them."""

    def __init__(self) -> None:
        self.sent: list = []
        self._go = threading.Semaphore(0)

    def __call__(self, session, params):
        self.sent.append(params)
        if not self._go.acquire(timeout=DEADLINE):
            raise TimeoutError("the test let no step go")
        session.forward_backward([rlnb.samples.cross_entropy(list(b"a step"))])
        session.optim_step(params).result()

    def called(self, k: int) -> None:
        """Wait until step ``k`` of the run has its params (and the line of the step before is drawn)."""
        wait_for(lambda: len(self.sent) >= k)

    def release(self) -> None:
        self._go.release()


@contextlib.contextmanager
def step_held(session, name: str):
    """A thread called ``name`` in the middle of a step on ``session`` (``session.stepping()`` held) for the block."""
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with session.stepping():
            held.set()
            done.wait(DEADLINE)

    holder = threading.Thread(target=hold, name=name)
    holder.start()
    try:
        assert held.wait(DEADLINE)
        yield holder
    finally:
        done.set()
        holder.join(DEADLINE)
