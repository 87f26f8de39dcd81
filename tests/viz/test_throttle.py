"""The live view's throttle: bursts of changes draw at most once per ``every``, the last change always draws,
and nothing draws after ``close``."""

import threading
import time

from rlnb.viz.throttle import Throttle


def _wait_for(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_burst_draws_spaced_by_every_and_the_last_change_is_drawn():
    seen, data, draws = [], {"v": 0}, []
    throttle = Throttle(lambda: (draws.append(time.monotonic()), seen.append(data["v"])), every=0.2)
    start = time.monotonic()
    for i in range(1, 101):
        data["v"] = i
        throttle.poke()
    burst = time.monotonic() - start
    _wait_for(lambda: seen and seen[-1] == 100)
    time.sleep(0.3)  # room for a draw that should not come
    assert all(b - a >= 0.2 - 1e-3 for a, b in zip(draws, draws[1:], strict=False))
    assert 1 <= len(draws) <= 2 + burst / 0.2  # one now, then one per window the burst lasted, one trailing
    assert seen[-1] == 100
    throttle.close(5)


def test_a_draw_that_raises_on_the_timer_thread_does_not_stop_later_draws():
    calls = []

    def draw():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first draw fails")

    throttle = Throttle(draw, every=0.0)
    throttle.poke()
    _wait_for(lambda: len(calls) == 1)
    throttle.poke()
    _wait_for(lambda: len(calls) == 2)
    throttle.close(5)


def test_close_waits_for_the_draw_in_progress_and_nothing_draws_after_it():
    started, release, calls = threading.Event(), threading.Event(), []

    def draw():
        calls.append(1)
        started.set()
        release.wait(10)

    throttle = Throttle(draw, every=0.0)
    throttle.poke()
    assert started.wait(10)
    closer = threading.Thread(target=throttle.close, args=(30,))
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive()  # waiting for the draw in progress
    release.set()
    closer.join(30)
    assert not closer.is_alive()
    throttle.poke()
    time.sleep(0.1)
    assert calls == [1]
