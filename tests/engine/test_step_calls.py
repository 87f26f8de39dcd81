"""Issue 20: a local step's own cost. Wall time means nothing on a loaded machine, but the Python calls rlnb makes
per step outside torch are deterministic: counted here, on every thread, as ``bench/bench_optim.py --overhead`` runs
the step (recording on, ``tiny``)."""

from __future__ import annotations

import math
import sys
import threading

import pytest

import rlnb
from rlnb import params, samples, wire
from rlnb.engine import handlers, stepping, tuner
from rlnb.engine import threads as threads_mod
from rlnb.errors import OperationError

pytestmark = pytest.mark.slow  # builds a session and runs 30 profiled steps

TEXT = list(b"hello world, this is a training step of rlnb")
STEPS = 10
BOUND = 182
"""Python calls outside torch per forward-backward + optim-step + result(): 752 before issue 20's cuts (a call per
record field to spell its floats, a path join per line written, a dtype check per gradient, a ``Future.done()`` per
status report or ``done()``), 464 after; 469 later, 425 after the second cut (a generator per part of a submitted
sample, a check per part of a model input, a lambda per report, ``done()`` per submission, the step's hyperparameters
checked twice); 429 later, 364 after the third (a call per nested dict of a record line and two for its encoder, the
run store's checks and write a call each per line, a loss's required params and other losses' fields read per
forward-backward, pydantic's ``model_fields`` property); 363 later, 357 after a history's reports skipped telling
no listener; 285 after the fourth (a report a chain of seven calls, now the operation's one and the history's; the
worker's envelopes validated; a ``concurrent.futures.Future`` per operation, 26 calls a step to make, end and wait
for; ``uuid.uuid4``); 293 later, 284 after the fifth (``fold_envelope`` folded into ``History.update``, 6; the step
log's ``_home`` called only where an optim-step kept its gradients, 3); 252 after the sixth (the same ``AdamParams``
given again unchanged keeps its check, body and recorded params, 32), 244 after the run store's record lines
made in ``RunStore.write_record`` (``as_row`` and ``line``, 8), 241 after a
forward-backward's logprobs pad only what needs it (3), 239 after a sample's copy reads its texts and inputs by
``map`` (2); 242 later, 233 after the worker resolved and checked a step's body once while the same body came back
unchanged (``stepping.step_hyperparams``, 10), 230 after AdamW's step became the engine's own
(``rlnb.engine.optim.adamw``: 7 of torch's ``typing.cast`` calls, for 4 of its own); 231 later, 207 after the
comprehensions and generators of a step's path became ``map``s and loops (a Python call each in Python 3.11, 11 of
them) and a forward-only evaluation's eval mode a ``try`` (its context manager, 6), 194 after the run store spelled a
record's row in a loop (``spelled`` and its comprehension a line, 8) and 5 more checks asked once or only where
needed, 192 after the engine's check of unread inputs compared a sample's keys with ``wire.LOSS_READS`` (2), 191 after
``wire.rules._params_model`` kept its answer per field (1 net); 195 with the record line's spelling written once, in
``jsontext.row_line`` (a call for each of the 4 record lines a step, where ``write_record`` had a copy of it); 176
after the ninth cut (``PER_FILE``: ``tiny``'s attention heads without a generator, 8; a fixed thread count's lease
bookkeeping, 4; the step log's times and loss, 3; an optim-step's result unvalidated, 4); 173 after the tenth (the
worker's operation id made in ``submit``, 2; a wait asking the worker's own ``runs_here``, not the backend's, 1); 171
after a fixed count set by ``ThreadUse.before`` itself (the lease's ``apply``, 2); 173 with a submission's Ctrl-C
held until it is whole (``ctrl_c.hold``, 2); 177 with the checks the engine shares with ``FakeBackend`` made
functions of ``rlnb.engine.refusals`` (a loss input's ``check_loaded`` and its finiteness lambda, 3; the target ids'
``check_target_ids``, 1) and a body's unset fields left out (``wire.given``, 1); 178 with the loss inputs' keys
checked by the function ``FakeBackend`` calls too (``refusals.check_given``, once a forward-backward, 1); 180 with a
forward-backward's batch checks a function that ``custom_forward_backward`` shares (``bodies.batch_list``, 1): the
bound leaves room for checks to come, not for those costs to return."""


MUON_BOUND = 216
"""The same for a Muon session's step with its one ``MuonParams``: 322 while its check, body and recorded params were
made afresh each step (``StepParams`` kept them for ``AdamParams`` only) and the worker resolved its body each time,
272 after, 269 with the engine's own AdamW step; 270 later, 230 after the cuts ``BOUND`` tells of, 234 with
``jsontext.row_line``, 215 after the ninth cut, 212 after the tenth, 210 after the eleventh, 215 with a step's later
checks (``bodies.batch_list`` the last)."""


AUTO_EXTRA = 3
"""The calls an Adam step adds where the thread policy times the counts (``threads=None``, two cores to share):
``tuner.work`` for each operation and its token count (13 while each operation also asked ``Lease.threads``, the
policy's ``limits``, the tuner's ``choose`` and ``record``, and counted a forward-backward's tokens by a generator:
``bench_optim.py --overhead``'s session runs so)."""


def _counted_session(tmp_path, count, optimizer="adam", threads=1):
    """A local ``tiny`` session (recording on; one thread, or ``threads``) whose worker, started as it connects, runs
    ``count`` as its profile function too."""
    threading.setprofile(count)
    try:
        return rlnb.connect(
            "local", model="tiny", device="cpu", runs_dir=str(tmp_path), threads=threads, optimizer=optimizer
        )
    finally:
        threading.setprofile(None)


class _Idle:
    """A load meter that reads an idle machine: the policy's guess is its cap."""

    def __call__(self) -> float:
        return 0.0


@pytest.mark.parametrize(("optimizer", "fixed"), [("adam", 1), ("muon", 1), ("adam", None)])
def test_a_recorded_local_step_makes_few_python_calls_outside_torch(tmp_path, monkeypatch, optimizer, fixed):
    counted = [0]
    on = threading.Event()

    def count(frame, event, arg):
        if event == "call" and on.is_set() and "/torch/" not in frame.f_code.co_filename:
            counted[0] += 1

    monkeypatch.setattr(threads_mod, "POLICY", threads_mod.ThreadPolicy(cpus=2, meter=_Idle()))  # counts to time
    session = _counted_session(tmp_path, count, optimizer, fixed)
    hp = rlnb.AdamParams(learning_rate=1e-3) if optimizer == "adam" else rlnb.MuonParams(learning_rate=0.02)
    batch, bound = [samples.cross_entropy(TEXT)], BOUND if optimizer == "adam" else MUON_BOUND
    bound += AUTO_EXTRA if fixed is None else 0
    warm = 5 if fixed is not None else 2 + 2 * tuner.TRIALS  # the auto policy's counts timed and kept by then

    def step():
        session.forward_backward(batch)
        session.optim_step(hp).result()

    try:
        for _ in range(warm):  # first steps fill caches and settle the thread policy
            step()
        on.set()
        sys.setprofile(count)
        try:
            for _ in range(STEPS):
                step()
        finally:
            sys.setprofile(None)
            on.clear()
    finally:
        session.close()
    assert len(session.history.records) == 2 * (warm + STEPS)  # the steps ran and were recorded
    if fixed is None:  # the counts were timed, and kept for both kinds
        assert len(session.backend._threads.lease.tuner.kept) == 2
    per_step = counted[0] / STEPS
    assert 50 < per_step < bound, per_step  # some calls were counted: the profile saw the step


def test_a_record_listener_hears_every_report_and_none_subscribed_costs_no_call(tmp_path):
    """``Listeners.tell`` was called for each report of each operation (6 Python calls a step) with no listener to
    tell; one subscribed hears each report still, in order."""
    from rlnb.history.listeners import Listeners

    told = [0]
    on = threading.Event()

    def count(frame, event, arg):
        if event == "call" and on.is_set() and frame.f_code is Listeners.tell.__code__:
            told[0] += 1

    session = _counted_session(tmp_path, count)
    batch, hp = [samples.cross_entropy(TEXT)], rlnb.AdamParams(learning_rate=1e-3)
    heard: list[tuple[int, str]] = []
    sys.setprofile(count)
    try:
        on.set()
        session.forward_backward(batch)
        session.optim_step(hp).result()
        assert told[0] == 0
        stop = session.history.on_record(lambda rec: heard.append((rec.seq, rec.status)))
        session.forward_backward(batch)
        session.optim_step(hp).result()
        stop()
    finally:
        sys.setprofile(None)
        on.clear()
        session.close()
    assert told[0] > 0  # the profile saw the subscribed listener told
    done = wire.OperationStatus.COMPLETED.value
    assert [seq for seq, status in heard if status == done] == [2, 3], heard  # both, the forward-backward first


@pytest.mark.parametrize("kind", ["adam", "muon"])
def test_the_same_step_body_is_resolved_once_and_a_change_inside_it_again(tmp_path, monkeypatch, kind):
    """The worker resolves and checks an optim-step body once while the same object comes back holding what it held
    (``stepping.step_hyperparams``: a loop's one ``hp`` gives one body); a change inside it, even past its checks, is
    resolved and checked again: an ``eps`` these float32 weights read as 0 is refused, a new rate is stepped with."""
    resolved, resolve = [], params.resolve
    monkeypatch.setattr(stepping.params_mod, "resolve", lambda k, b: resolved.append(b) or resolve(k, b))
    session = rlnb.connect("local", model="tiny", device="cpu", optimizer=kind, record=False, threads=1)
    engine, cancelled = session.backend.engine, threading.Event()
    fb = wire.ForwardBackwardBody(samples=[samples.cross_entropy(TEXT)], loss=wire.loss_config("cross_entropy", None))
    adam = rlnb.AdamParams(learning_rate=1e-3)
    hp = adam if kind == "adam" else rlnb.MuonParams(learning_rate=0.02, adam=adam)
    body = wire.OptimStepBody.model_construct(**{f"{kind}_params": hp})

    def step(body: wire.OptimStepBody) -> None:
        handlers.run(engine, wire.OperationKind.FORWARD_BACKWARD, fb, cancelled)
        handlers.run(engine, wire.OperationKind.OPTIM_STEP, body, cancelled)

    try:
        for _ in range(3):
            step(body)
        assert len(resolved) == 1
        object.__setattr__(adam, "eps", 1e-50)  # past its checks, inside the body (a Muon's: inside its adam)
        adam.__pydantic_fields_set__.add("eps")
        with pytest.raises(OperationError, match=r"eps 1e-50 is 0 in float32"):
            step(body)
        object.__setattr__(adam, "eps", 1e-8)
        adam.learning_rate = 5e-3
        step(body)
        assert engine.optim._adamw.param_groups[0]["lr"] == 5e-3  # the new rate stepped with
        step(wire.OptimStepBody.model_construct(**{f"{kind}_params": hp}))  # another body: resolved afresh
        step(body)  # and back: afresh too (the last body is the one kept)
    finally:
        session.close()
    assert len(resolved) == 5


PER_FILE = {
    "engine/models/tiny.py": 7,
    "engine/threads.py": 6,
    "history/timing.py": 0,
    "history/record.py": 3,
    "wire/base.py": 0,
}
"""Python calls a step by file, for the files of issue 20's ninth cut: ``tiny``'s forward one call per module (its
attention's heads were a generator over q, k and v, 4 steps a layer: 15), the thread policy's bookkeeping three an
operation at a fixed count (the lease's ``apply``, ``threads`` and ``idle`` were 5: 10), the step log's times folded
inline (``timing.op_times`` was a call an operation: 2), a forward-backward's ``step_loss`` read once (4) and an
optim-step's result built of the engine's own int and floats without validation (``wire/base.py``'s int64 validators
and pydantic's bounds: 2 of its 5 calls)."""


def test_the_ninth_cut_stays_cut(tmp_path):
    """Each file of the ninth cut makes at most ``PER_FILE``'s calls a step (every thread, recording on)."""
    import collections

    by_file: collections.Counter[str] = collections.Counter()
    on = threading.Event()

    def count(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and on.is_set() and "/rlnb/" in name:
            by_file[name.rsplit("/rlnb/", 1)[1]] += 1

    session = _counted_session(tmp_path, count)
    batch, hp = [samples.cross_entropy(TEXT)], rlnb.AdamParams(learning_rate=1e-3)
    try:
        for _ in range(5):
            session.forward_backward(batch)
            session.optim_step(hp).result()
        on.set()
        sys.setprofile(count)
        try:
            for _ in range(STEPS):
                session.forward_backward(batch)
                session.optim_step(hp).result()
        finally:
            sys.setprofile(None)
            on.clear()
    finally:
        session.close()
    per_step = {name: by_file[name] / STEPS for name in PER_FILE}
    assert by_file["session/operation.py"] > 0  # the profile saw the steps
    assert all(per_step[name] <= bound for name, bound in PER_FILE.items()), per_step


@pytest.mark.parametrize(
    ("step", "metrics"),
    [(3, {"grad_norm": 0.5, "clip_coef": float("nan")}), (0, {}), (2, {"grad_clip_norm": 1}), (True, {"a": 1.0})],
)
def test_an_optim_steps_result_is_the_validated_one(step, metrics):
    """``stepping.optim_result`` builds what ``wire.OptimStepResult`` validates: the same fields, dump and JSON; an int
    metric validated into its float, a bool step refused as validation refuses it."""
    try:
        want = wire.OptimStepResult(step=step, metrics=dict(metrics))
    except ValueError as exc:
        with pytest.raises(type(exc)):
            stepping.optim_result(step, dict(metrics))
        return
    got = stepping.optim_result(step, dict(metrics))
    assert type(got) is wire.OptimStepResult
    assert got.model_dump_json() == want.model_dump_json()
    assert repr(got.model_dump()) == repr(want.model_dump())  # NaN too, and 1.0 where 1 was given
    assert got.model_fields_set == want.model_fields_set and got.model_extra == want.model_extra
    assert got.__pydantic_private__ == want.__pydantic_private__ and list(vars(got)) == list(vars(want))
    assert got == want or math.isnan(got.metrics.get("clip_coef", 0.0))  # NaN is unequal to itself, as validated
