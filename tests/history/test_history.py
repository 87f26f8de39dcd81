"""The run store and the tables: kill -9 safety, reload, corrupt tails, typed columns, steps, exports; on
FakeBackend sessions unless the engine is what a test reads back (kill -9, a run's seed)."""

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import pandas as pd
import pytest

import rlnb
from rlnb import samples, wire
from rlnb.engine.backend import LocalBackend
from rlnb.history import History, RunContinuedWarning
from rlnb.history.catalog import compare, runs
from rlnb.history.paths import RUNS_DIR_ENV
from rlnb.history.tables import steps_table
from rlnb.testing import FakeBackend
from tests.support.steps_reference import steps_table as reference_steps

T0 = 1_700_000_000.0

CHILD = textwrap.dedent(
    """
    import sys
    import rlnb
    from rlnb import samples
    from rlnb.engine.backend import LocalBackend

    session = rlnb.Session(LocalBackend("adam", "tiny", device="cpu"), runs_dir=sys.argv[1], run_id="killed")
    batch = [samples.cross_entropy(list(b"never lose a record"))]
    while True:
        fb = session.forward_backward(batch)
        opt = session.optim_step(rlnb.AdamParams(learning_rate=1e-3))
        for op in (fb, opt):
            op.result()
            print("completed", op.id, flush=True)
    """
)


@pytest.mark.slow  # a Python process that trains
def test_kill_9_loses_no_completed_operation(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    completed = []
    try:
        for line in proc.stdout:
            completed.append(line.split()[1])
            if len(completed) >= 12:
                break
        os.kill(proc.pid, signal.SIGKILL)  # no chance to flush or close anything
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    df = History.load(tmp_path / "killed").df
    done = df[df.status == "TRAINING_OPERATION_STATUS_COMPLETED"]
    assert set(completed) <= set(done.op_id)
    assert len(done) >= 12 and list(df.seq) == list(range(len(df)))


def run_session(tmp_path, run_id, steps=3, backend=None, **kw):
    """A recorded run of ``steps`` steps (two forward-backwards, an optimizer step, a sync, a logged reward) on
    ``backend``: FakeBackend unless the engine's own config (its seed) is what a test reads back."""
    backend = backend or FakeBackend(delay=0.001)
    s = rlnb.Session(backend, runs_dir=tmp_path, run_id=run_id, **kw)
    for i in range(steps):
        s.forward_backward([samples.cross_entropy(list(b"first half"))])
        s.forward_backward([samples.cross_entropy(list(b"second half"))])
        s.optim_step(rlnb.AdamParams(learning_rate=1e-3 * (i + 1)))
        s.weights_sync()
        s.history.log(i + 1, reward=0.1 * (i + 1))
    s.wait()
    s.close()
    return s.history


def test_reload_round_trip_and_typed_columns(tmp_path):
    h = run_session(tmp_path, "a")
    again = History.load(tmp_path / "a")
    assert again.config["run_id"] == "a" and again.config["optimizer"] == "adam" and "torch" in again.config["versions"]
    pd.testing.assert_frame_equal(again.df, h.df)
    pd.testing.assert_frame_equal(again.logged, h.logged)
    df = again.df
    assert isinstance(df.kind.dtype, pd.CategoricalDtype) and isinstance(df.status.dtype, pd.CategoricalDtype)
    assert isinstance(df.error_code.dtype, pd.CategoricalDtype)
    assert str(df.submitted_at.dtype) == "datetime64[ns, UTC]" and df.loss.dtype == "float64"
    assert (df.queue_s >= 0).all() and (df.run_s >= 0).all()


def test_steps_table(tmp_path):
    h = run_session(tmp_path, "s")
    steps = h.steps
    assert list(steps.step) == [1, 2, 3]
    ops = h.df
    fb = ops[ops.kind == "forward-backward"]
    assert steps.loss.iloc[0] == pytest.approx(fb.loss.iloc[0] + fb.loss.iloc[1])
    assert list(steps.learning_rate) == pytest.approx([1e-3, 2e-3, 3e-3])
    assert (steps.grad_norm > 0).all() and (steps.grad_clip_norm == 1.0).all()
    assert list(steps.weights_version) == [1, 2, 3]
    assert list(steps.reward) == pytest.approx([0.1, 0.2, 0.3])
    assert steps.step_time_s.iloc[1:].gt(0).all()


def test_exports_round_trip(tmp_path):
    h = run_session(tmp_path, "e", steps=2)
    h.to_csv(tmp_path / "h.csv")
    csv = pd.read_csv(tmp_path / "h.csv")
    assert list(csv.kind) == list(h.df.kind) and csv.loss.equals(h.df.loss.reset_index(drop=True))
    h.to_parquet(tmp_path / "h.parquet")
    pq = pd.read_parquet(tmp_path / "h.parquet")
    assert list(pq.op_id) == list(h.df.op_id)
    assert json.loads(pq.params.iloc[2]) == {"learning_rate": 1e-3}


def test_corrupt_tail_is_skipped_with_a_warning(tmp_path):
    run_session(tmp_path, "c", steps=1)
    ops = tmp_path / "c" / "ops.jsonl"
    good = History.load(tmp_path / "c").df
    with open(ops, "a") as fh:
        fh.write('{"seq": 99, "kind": "optim-st')  # a write cut short by a crash
    with pytest.warns(RuntimeWarning, match="half-written"):
        again = History.load(tmp_path / "c")
    pd.testing.assert_frame_equal(again.df, good)
    with pytest.raises(FileNotFoundError, match="not an rlnb run folder"):
        History.load(tmp_path)


def test_runs_and_compare(tmp_path):
    run_session(tmp_path, "r1", backend=LocalBackend("adam", "tiny", device="cpu", seed=1))
    run_session(tmp_path, "r2", backend=LocalBackend("adam", "tiny", device="cpu", seed=2), steps=2)
    table = runs(tmp_path)
    assert set(table.run_id) == {"r1", "r2"} and set(table.steps) == {3, 2}
    assert (table.failed == 0).all() and table.final_loss.notna().all()
    both = compare([tmp_path / "r1", tmp_path / "r2"], labels=["one", "two"])
    assert list(both.run) == ["one"] * 3 + ["two"] * 2 and list(both.seed) == [1, 1, 1, 2, 2]
    assert rlnb.runs is runs and rlnb.compare is compare


@pytest.mark.slow  # trains four sessions of the tiny model (~1 s); test_runs_and_compare keeps compare in the fast tier
def test_compare_keeps_two_runs_of_one_run_id_apart(tmp_path):
    """The same run_id in two runs folders (and the same seed) used to merge into one averaged line."""
    for folder, seed_steps in (("adam-lo", 3), ("adam-hi", 2)):
        run_session(
            tmp_path / folder, "trial", backend=LocalBackend("adam", "tiny", device="cpu", seed=1), steps=seed_steps
        )
    both = compare([tmp_path / "adam-lo" / "trial", tmp_path / "adam-hi" / "trial"])
    assert list(both.run) == ["adam-lo/trial"] * 3 + ["adam-hi/trial"] * 2
    assert both.pivot(index="step", columns="run", values="loss").shape == (3, 2)
    with pytest.raises(ValueError, match=r"runs \[0, 1\] share label 'x' and seed 1: they would be one line"):
        compare([tmp_path / "adam-lo" / "trial", tmp_path / "adam-hi" / "trial"], labels=["x", "x"])
    with pytest.raises(ValueError, match="labels has 1 entries for 2 runs"):
        compare([tmp_path / "adam-lo" / "trial", tmp_path / "adam-hi" / "trial"], labels=["x"])
    seeds = [
        run_session(tmp_path / "seeds", f"s{k}", backend=LocalBackend("adam", "tiny", device="cpu", seed=k))
        for k in (1, 2)
    ]
    assert set(compare(seeds, labels=["adam", "adam"]).run) == {"adam"}  # one config's seeds stay one label


def test_a_failed_optim_step_does_not_shift_the_loss_of_the_steps_after_it(tmp_path):
    """A step's loss is that of the forward-backwards submitted since the optim-step before, a failed one too (a
    NON_FINITE_LOSS step drops their gradients). Keyed by the step number the session predicted at submission, every
    step after a failed one showed the loss of the one before: step 1 had the failed step's 10, step 2 had 20."""
    from rlnb.sinks.points import replay

    failed = iter([True, False, False])
    fail = lambda kind, body, step: "NON_FINITE_LOSS" if kind == "optim-step" and next(failed) else None  # noqa: E731
    losses = iter([10.0, 20.0, 30.0])
    s = rlnb.Session(FakeBackend(fail=fail, loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    for _ in range(3):
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
    s.close()
    for steps in (s.history.steps, History.load(tmp_path / "r").steps, steps_table(s.history.df)):
        assert steps[["step", "loss"]].to_dict("records") == [{"step": 1, "loss": 20.0}, {"step": 2, "loss": 30.0}]
    points, failures = replay(s.history, 0.0)
    assert [(p.step, p.values["loss"]) for p in points] == [(1, 20.0), (2, 30.0)] and len(failures) == 1
    pd.testing.assert_frame_equal(s.history.steps, reference_steps(s.history.df), check_dtype=False)
    rows = s.history.step_log.settled(0)
    assert [(r.step, r.loss) for r in rows] == [(1, 20.0), (2, 30.0)]


def test_an_optim_step_that_failed_keeping_the_gradients_leaves_their_loss_to_the_step_that_applies_them(tmp_path):
    """An optim-step that fails INVALID_INPUT keeps the gradients; the corrected one after it applies them: its row
    showed loss NaN (the 10 was nowhere), and every forward-backward after it a step one higher in ``df``. Pipelined
    (the second forward-backward submitted before the failure is known), both losses are the step's too."""
    from rlnb.sinks.points import replay

    failed = iter([True, False, False, True, False])
    fail = lambda kind, body, step: "INVALID_INPUT" if kind == "optim-step" and next(failed) else None  # noqa: E731
    losses = iter([10.0, 20.0, 30.0, 40.0])
    s = rlnb.Session(FakeBackend(fail=fail, loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    batch = [samples.cross_entropy(list(b"ab"))]
    s.forward_backward(batch).result()
    with pytest.raises(rlnb.OperationFailed):
        s.optim_step().result()
    s.optim_step().result()  # step 1 applies the 10
    s.forward_backward(batch)
    s.optim_step()  # step 2: 20
    s.forward_backward(batch)
    s.optim_step()  # fails, keeping the 30
    s.forward_backward(batch)  # submitted before the failure is known
    s.optim_step()  # step 3: 30 + 40
    s.wait()
    s.close()
    expected = [{"step": 1, "loss": 10.0}, {"step": 2, "loss": 20.0}, {"step": 3, "loss": 70.0}]
    for steps in (s.history.steps, History.load(tmp_path / "r").steps, steps_table(s.history.df)):
        assert steps[["step", "loss"]].to_dict("records") == expected
    for df in (s.history.df, History.load(tmp_path / "r").df):  # the last one was submitted behind the failing step
        assert list(df[df.kind == wire.OperationKind.FORWARD_BACKWARD].step) == [0, 1, 2, 2]  # it said 3
        assert list(df[df.kind == wire.OperationKind.OPTIM_STEP].step) == [0, 1, 2, 2, 3]  # failed: the step before
    assert [(p.step, p.values["loss"]) for p in replay(s.history, 0.0)[0]] == [(1, 10.0), (2, 20.0), (3, 70.0)]
    pd.testing.assert_frame_equal(s.history.steps, reference_steps(s.history.df), check_dtype=False)
    assert [(r.step, r.loss) for r in s.history.step_log.settled(0)] == [(1, 10.0), (2, 20.0), (3, 70.0)]


def test_a_record_finished_before_the_failure_behind_which_it_was_submitted_gets_its_step_lowered_on_disk(tmp_path):
    """A remote poller may report a forward-backward COMPLETED before the optim-step it was submitted behind FAILED:
    its line was written with the step it counted; ``uncount_step`` writes it again lowered, and ``df`` (whose
    finished rows are cached) shows the new step, as the reloaded run does."""
    h = History.create({"optimizer": "adam"}, tmp_path, "r")
    opt = h.new("optim-step", 0, None, at=T0)
    fb = h.new("forward-backward", 1, None, at=T0)
    finish(h, fb, T0 + 1)
    assert list(h.df.step) == [0, 1]  # the fb's row is not cached yet: the optim-step before it is unfinished
    finish(h, opt, T0 + 2, ok=False)
    assert list(h.df.step) == [0, 1]  # both rows cached now
    h.uncount_step(opt)
    h.close()
    assert list(h.df.step) == [0, 0] and list(History.load(tmp_path / "r").df.step) == [0, 0]


def test_a_continued_run_keeps_each_sessions_loss_at_a_repeated_step(tmp_path):
    """A second session on a run id from step 0 repeats its step numbers: each row of a repeated step showed the
    sum of both sessions' losses (10 + 12 = 22, twice)."""
    for loss in (10.0, 12.0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RunContinuedWarning)
            s = rlnb.Session(FakeBackend(loss=lambda step, loss=loss: loss), runs_dir=tmp_path, run_id="r")
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
        s.close()
    for h in (s.history, History.load(tmp_path / "r")):
        assert h.steps[["step", "loss"]].to_dict("records") == [{"step": 1, "loss": 10.0}, {"step": 1, "loss": 12.0}]


def test_weights_version_is_the_one_published_after_that_step_in_its_own_session(tmp_path):
    """A continued run repeats step numbers: session 1's syncs at steps 1 and 2 showed as published at session 2's
    steps 1 and 2, which synced nothing. And a server that numbers versions on its own (here 101) is read as it says,
    not looked up by step number."""
    run_session(tmp_path, "r", steps=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunContinuedWarning)
        again = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    for _ in range(2):
        again.forward_backward([samples.cross_entropy(list(b"ab"))])
        again.optim_step()
    again.wait()
    again.close()
    for h in (again.history, History.load(tmp_path / "r")):
        assert list(h.steps.step) == [1, 2, 1, 2]
        assert [None if pd.isna(v) else v for v in h.steps.weights_version] == [1, 2, None, None]
    h = History()
    recs = [h.new(kind, 0, None, at=T0) for kind in ("forward-backward", "optim-step", "weights-sync")]
    for rec in recs[:2]:
        finish(h, rec, T0 + 1)
    synced = wire.Operation(id="op-2", status=COMPLETED, output=wire.WeightsSyncResult(weights_version=101))
    h.update(recs[2], synced, T0 + 2)
    assert h.steps[["step", "weights_version"]].to_dict("records") == [{"step": 1, "weights_version": 101}]


def test_a_continued_run_starts_a_step_of_its_own(tmp_path):
    """A session killed after a forward-backward (5) and before its optim-step, then continued: the new session's first
    step showed 5 + 7 = 12, the dead session's loss summed into it, live and reloaded. A session starts a step."""
    losses = iter([10.0, 5.0, 7.0, 1.0])
    batch = [samples.cross_entropy(list(b"ab"))]
    s = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    s.forward_backward(batch)
    s.optim_step()
    s.forward_backward(batch).result()
    s.history.close()  # the process dies: its records are on disk
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunContinuedWarning)
        again = rlnb.Session(FakeBackend(loss=lambda step: next(losses)), runs_dir=tmp_path, run_id="r")
    again.forward_backward(batch)
    again.optim_step()
    again.forward_backward(batch)
    again.optim_step()
    again.wait()
    again.close()
    expected = [{"step": 1, "loss": 10.0}, {"step": 1, "loss": 7.0}, {"step": 2, "loss": 1.0}]
    for h in (again.history, History.load(tmp_path / "r")):
        assert h.steps[["step", "loss"]].to_dict("records") == expected
        # a plot given the operations table sees where the session began too (it summed 5 + 7 = 12)
        df = h.df
        for ops in (df, df[df.kind != "sample"], df.copy()):
            assert steps_table(ops)[["step", "loss"]].to_dict("records") == expected
    from rlnb.history.runconfig import session_starts
    from rlnb.sinks.points import Steps

    steps = Steps(session_starts(again.history.config))  # what rlnb.export sends a sink
    items = [i for rec in History.load(tmp_path / "r").records for i in steps.record(rec)] + steps.drain()
    assert [(p.step, p.values["loss"]) for p in items] == [(1, 10.0), (1, 7.0), (2, 1.0)]


def test_the_steps_table_of_an_operations_table_leaves_out_evaluations():
    """``steps_table(history.df)`` (what a plot given ``history.df`` draws) counted a ``forward_only`` evaluation's loss
    in its step's: 2.0 where ``history.steps`` has 1.0 (the records it rebuilt had no params)."""
    from rlnb.viz import plots

    s = rlnb.Session(FakeBackend(), record=False)
    for _ in range(2):
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.forward_backward([samples.cross_entropy(list(b"held out"))], forward_only=True)
        s.optim_step()
        s.wait()
    s.close()
    pd.testing.assert_frame_equal(steps_table(s.history.df), s.history.steps)
    assert list(plots.loss(s.history.df).lines[0].get_ydata()) == [1.0, 0.5]


def test_compare_loads_an_old_run_whose_label_is_no_valid_unicode_and_shows_it_escaped(tmp_path):
    """A ``config.json`` label with a lone surrogate (an older rlnb wrote labels unchecked; JSON keeps it as
    ``\\udcff``): ``rlnb.compare`` and ``plots.compare`` failed with a ``UnicodeEncodeError`` and no run was shown."""
    from rlnb.viz import plots

    run_session(tmp_path, "old", steps=2)
    run_session(tmp_path, "new", steps=3)
    config = tmp_path / "old" / "config.json"
    written = json.loads(config.read_text())
    config.write_text(json.dumps({**written, "label": "adam \udcff lo"}))  # as json.dumps writes one: an escape
    assert "\\udcff" in config.read_text()
    with pytest.warns(RuntimeWarning, match=r"old/config.json: its label 'adam \\\\udcff lo' is not valid Unicode"):
        both = compare([tmp_path / "old", tmp_path / "new"])
    assert list(both.run) == ["adam \\udcff lo"] * 2 + ["new"] * 3  # both runs, every step, the label escaped
    assert list(both.step) == [1, 2, 1, 2, 3]
    with pytest.warns(RuntimeWarning, match="not valid Unicode"):
        ax = plots.compare([tmp_path / "old", tmp_path / "new"], y="reward")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["adam \\udcff lo", "new"]
    ax.figure.canvas.draw()  # drawn, the escaped label included


def test_compare_keeps_two_runs_of_one_folder_label_and_seed_apart(tmp_path):
    """Two runs of one runs folder annotated with the same label (and seed) took the folder's name, the same for
    both, and were merged into one line; the same run given twice too."""
    for run_id in ("a", "b"):
        s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id=run_id)
        s.history.annotate(label="adam", seed=1)
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
        s.close()
    both = compare([tmp_path / "a", tmp_path / "b"])
    assert both.run.nunique() == 2 and both.pivot(index="step", columns="run", values="loss").shape == (1, 2)
    assert compare([tmp_path / "a", tmp_path / "a"]).run.nunique() == 2


def test_compare_keeps_a_baseline_logged_before_the_first_optim_step(tmp_path):
    """``history.log(0, **{"eval/accuracy": 0.25})`` before training (the baseline a teacher wants on the plot):
    ``rlnb.compare`` stacked the steps tables, one row per optim-step, and dropped it, from its table and from
    ``plots.compare``, which drew the accuracy from step 2. It is a row of its own (its figures, NaN elsewhere);
    the other rows are the steps table's, unchanged, and a figure logged after the last step is kept too."""
    from rlnb.viz import plots

    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="a")
    s.history.log(0, **{"eval/accuracy": 0.25})
    for step in (1, 2):
        s.forward_backward([samples.cross_entropy(list(b"ab"))])
        s.optim_step()
        s.wait()
        s.history.log(step, reward=0.5)
    s.history.log(2, **{"eval/accuracy": 0.75})
    s.history.log(3, **{"eval/accuracy": math.nan})  # NaN only: the last non-NaN of each figure, as steps keeps
    s.history.log(3, **{"eval/accuracy": 0.8})
    s.close()
    table = compare([tmp_path / "a"])
    assert list(table.step) == [0, 1, 2, 3] and table.step.dtype == "int64"
    assert table["eval/accuracy"].tolist()[0] == 0.25 and table["eval/accuracy"].tolist()[2:] == [0.75, 0.8]
    assert table.loss.iloc[[0, 3]].isna().all() and table.reward.iloc[[0, 3]].isna().all()
    steps = s.history.steps
    pd.testing.assert_frame_equal(table.iloc[1:3].drop(columns=["run", "seed"]).reset_index(drop=True), steps)
    (line,) = plots.compare([tmp_path / "a"], y="eval/accuracy").lines
    assert line.get_xydata().tolist() == [[0, 0.25], [2, 0.75], [3, 0.8]]
    assert len(steps) == 2  # history.steps stays one row per optim-step (history.logged has every row)


@pytest.mark.parametrize(
    "given, says",
    [
        ("a", r"compare takes a list of runs \(Histories or run folders\).* got str: '.*a'; one run alone: \[run\]"),
        (None, "compare takes a list of runs .* got NoneType: None"),
        ([5], r"histories\[0\] must be a History or a run folder, got int: 5"),  # "path must be a path"
    ],
)
def test_compare_given_no_list_of_runs_names_it(tmp_path, given, says):
    """``rlnb.compare("rlnb-runs/a")`` loaded each character as a run ("r is not an rlnb run folder"); a Path or a
    History alone was "'PosixPath' object is not iterable"; ``labels="ab"`` labelled two runs a and b."""
    run_session(tmp_path, "a", steps=1)
    given = str(tmp_path / "a") if given == "a" else given
    with pytest.raises(TypeError, match=says):
        compare(given)
    for alone in (tmp_path / "a", History.load(tmp_path / "a")):
        with pytest.raises(TypeError, match="compare takes a list of runs"):
            compare(alone)
    with pytest.raises(TypeError, match="labels must be a list, one label per run, got the str 'ab'"):
        compare([tmp_path / "a", tmp_path / "a"], labels="ab")
    assert list(compare([tmp_path / "a"], labels=["x"]).run) == ["x"]


def test_runs_of_an_empty_path_is_refused_not_the_working_folder(tmp_path, monkeypatch):
    """``rlnb.runs(os.environ.get("RUNS", ""))``: ``''`` listed the working folder (and its run folders), where
    ``connect(runs_dir='')`` is refused."""
    run_session(tmp_path, "a", steps=1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"runs: path must be a runs folder's path or None \(./rlnb-runs\), got ''"):
        rlnb.runs("")
    assert list(rlnb.runs(".").run_id) == ["a"]  # the working folder, asked for


def test_compare_keeps_a_figure_logged_as_run_or_seed(tmp_path):
    """``compare`` adds ``run`` and ``seed`` columns: a figure logged under either name stopped it (and
    ``plots.compare``) with pandas' ``cannot insert run, already exists``."""
    h = run_session(tmp_path, "a", steps=2)
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="b")
    s.forward_backward([samples.cross_entropy(list(b"ab"))])
    s.optim_step()
    s.wait()
    s.history.log(1, seed=7.0, run=3.0)
    s.close()
    both = compare([h, tmp_path / "b"], labels=["x", "y"])
    assert list(both.run) == ["x", "x", "y"] and list(both["seed (logged)"].iloc[2:]) == [7.0]
    assert list(both["run (logged)"].iloc[2:]) == [3.0] and list(both.seed) == [0, 0, 0]  # config's, not the figure
    from rlnb.viz import plots

    plots.compare([h, tmp_path / "b"])


def test_html_summary_and_record_off(tmp_path):
    h = run_session(tmp_path, "h", steps=1)
    html = h._repr_html_()
    assert "4 operations" in html and "completed" in html and "<table" in html
    s = rlnb.Session(FakeBackend(), record=False)
    assert s.history.path is None
    s.close()


def test_finished_records_are_on_disk_before_listeners_hear_of_them(tmp_path):
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="order")
    seen = []

    def check(rec):
        if rec.status in ("TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"):
            lines = (tmp_path / "order" / "ops.jsonl").read_text().splitlines()
            seen.append(json.loads(lines[-1])["status"] == rec.status)

    s.history.on_record(check)
    s.forward_backward([samples.cross_entropy(list(b"abc"))])
    s.wait()
    s.close()
    assert seen and all(seen)


# -- incremental views ---------------------------------------------------------------------------

PENDING, RUNNING = "TRAINING_OPERATION_STATUS_PENDING", "TRAINING_OPERATION_STATUS_RUNNING"
COMPLETED, FAILED = "TRAINING_OPERATION_STATUS_COMPLETED", "TRAINING_OPERATION_STATUS_FAILED"


def finish(h, rec, at, ok=True, loss=1.0, grad_norm=0.5):
    h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=RUNNING), at)
    out = None
    if ok and rec.kind == "forward-backward":
        out = wire.ForwardBackwardResult(loss=loss)
    elif ok and rec.kind == "optim-step":
        out = wire.OptimStepResult(step=rec.step + 1, metrics={"grad_norm": grad_norm, "learning_rate": 1e-3})
    elif ok and rec.kind == "weights-sync":
        out = wire.WeightsSyncResult(weights_version=rec.step)
    error = None if ok else wire.OperationError(code="TRAINING_OPERATION_ERROR_CODE_INVALID_INPUT", message="no")
    h.update(rec, wire.Operation(id=f"op-{rec.seq}", status=COMPLETED if ok else FAILED, output=out, error=error), at)


def fresh_df(h):
    from rlnb.history.tables import _columns, _ops_frame

    return _ops_frame(_columns(h.records))


@pytest.mark.parametrize(
    ("changes", "seed"),
    # seed 2 finishes two records twice within 100 changes; 600 changes are 120 full rebuilds of the tables
    [(100, 2), pytest.param(600, 0, marks=pytest.mark.slow)],
    ids=["100-changes", "600-changes"],
)
def test_incremental_df_and_steps_equal_a_fresh_build(changes, seed):
    """Random submissions, completions out of order (as a remote poller sees them), failures, NaN
    losses, a record finished twice, logged figures; compared at every 5th change."""
    rng = random.Random(seed)
    h, open_ops, step = History(), [], 0
    for i in range(changes):
        if rng.random() < 0.45:
            kind = rng.choice(["forward-backward", "forward-backward", "optim-step", "weights-sync", "sample"])
            open_ops.append(h.new(kind, step, {"learning_rate": 1e-3} if kind == "optim-step" else None, at=T0 + i))
            step += kind == "optim-step"
        elif open_ops:
            rec = open_ops.pop(rng.randrange(len(open_ops)) if rng.random() < 0.3 else 0)
            loss = rng.choice([rng.random(), math.nan])
            finish(h, rec, T0 + i + 0.5, ok=rng.random() < 0.85, loss=loss, grad_norm=rng.random())
            if rng.random() < 0.02:  # a late second terminal update of the same record
                finish(h, rec, T0 + i + 0.7, loss=2.0)
        if rng.random() < 0.2:
            h.log(rng.randrange(step + 1), **rng.choice([{"reward": rng.random()}, {"acc": 1.0, "reward": math.nan}]))
        if i % 5 == 0:
            fresh = fresh_df(h)
            pd.testing.assert_frame_equal(h.df, fresh, check_exact=True)
            expected = reference_steps(fresh, h.logged)  # built once: the pandas build is half this test's CPU
            pd.testing.assert_frame_equal(h.steps, expected)
            pd.testing.assert_frame_equal(steps_table(fresh, h.logged), expected)
    assert len(h.steps) > changes // 30 and h._ops_table.kept >= changes // 3


def test_steps_does_not_rebuild_the_operations_table(monkeypatch):
    h = History()
    for i in range(3):
        finish(h, h.new("forward-backward", i, None, at=T0 + i), T0 + i, loss=float(i))
        finish(h, h.new("optim-step", i, None, at=T0 + i), T0 + i + 0.5)
    h.log(3, reward=0.5)
    expected = reference_steps(h.df, h.logged)
    monkeypatch.setattr(History, "df", property(lambda self: pytest.fail(".steps rebuilt .df")))
    pd.testing.assert_frame_equal(h.steps, expected)


def test_df_builds_only_the_rows_that_were_not_finished(monkeypatch):
    import rlnb.history.tables as tables_module

    built = []
    real = tables_module._ops_frame
    monkeypatch.setattr(tables_module, "_ops_frame", lambda cols: built.append(len(cols["seq"])) or real(cols))
    h = History()
    for i in range(50):
        finish(h, h.new("forward-backward", i, None, at=T0 + i), T0 + i)
    running = h.new("sample", 50, None, at=T0 + 50)
    assert len(h.df) == 51
    assert sum(built) == 51
    built.clear()
    finish(h, h.new("forward-backward", 51, None, at=T0 + 51), T0 + 51)
    assert len(h.df) == 52 and sum(built) == 2  # the unfinished sample and the new one, not all 52
    finish(h, running, T0 + 52)
    expected = fresh_df(h)
    built.clear()
    pd.testing.assert_frame_equal(h.df, expected)
    assert sum(built) == 2


def test_step_log_hands_out_only_rows_that_will_not_change():
    h = History()
    fb = h.new("forward-backward", 0, None, at=T0)
    opt1 = h.new("optim-step", 0, None, at=T0 + 1)
    opt2 = h.new("optim-step", 1, None, at=T0 + 2)
    finish(h, opt2, T0 + 3)  # seen first (a remote poller), though submitted second
    assert h.step_log.settled(0) == [] and list(h.steps.step) == [2]
    finish(h, opt1, T0 + 4)
    assert h.step_log.settled(0) == []  # step 1's forward-backward is still running: its loss may change
    finish(h, fb, T0 + 5, loss=0.75)
    rows = h.step_log.settled(0)
    assert [r.step for r in rows] == [1, 2]
    assert rows[0].loss == 0.75 and math.isnan(rows[1].loss) and h.step_log.settled(2) == []


def test_a_reloaded_run_has_the_same_steps(tmp_path):
    h = run_session(tmp_path, "reload", steps=3)
    pd.testing.assert_frame_equal(History.load(tmp_path / "reload").steps, h.steps)


def test_log_refuses_what_a_table_cannot_hold_before_recording_it(tmp_path):
    """A figure named like a steps column (``loss`` is the forward-backwards' own), a figure that is not a real
    number, a step that is not an integer >= 0: each refused naming it, with nothing written to memory or disk."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward([samples.cross_entropy([1, 2, 3])])
    s.optim_step().result(30)
    refused = {
        "is a column of the steps table": [dict(loss=0.5), dict(grad_norm=1.0), dict(queue_s=0.1)],
        "'rlnb_session' is the run folder's own field": [dict(rlnb_session=1.0)],
        "reward must be a real number": [
            dict(reward="0.5"),
            dict(reward=None),
            dict(reward=[1]),
            dict(reward=True),
            dict(reward=10**400),
        ],
    }
    for message, cases in refused.items():
        for figures in cases:
            with pytest.raises(ValueError, match=message):
                s.history.log(1, **figures)
    for step in (1.7, -1, True, "1", 2**63):
        with pytest.raises(ValueError, match=r"step must be an integer >= 0 and < 2\*\*63"):
            s.history.log(step, reward=1.0)
    with pytest.raises(ValueError, match="'step' is a column of the steps table"):  # Python's TypeError: "got
        s.history.log(1, step=2.0)  # multiple values for argument 'step'"
    s.history.log(step=1, reward=0.5, my_loss=0.25)  # the step by name
    s.close()
    assert (tmp_path / "r" / "metrics.jsonl").read_text().count("\n") == 1
    row = {"step": 1, "reward": 0.5, "my_loss": 0.25}
    for h in (s.history, History.load(tmp_path / "r")):
        assert h.logged.to_dict("records") == [row] and h.steps[list(row)].to_dict("records") == [row]
        assert h.logged_rows() == [(row, 0)]  # the run's first session logged it
    line = json.loads((tmp_path / "r" / "metrics.jsonl").read_text())
    assert line == {**row, "rlnb_session": 0}  # the field beside the figures: never a figure itself


def test_log_refuses_numpy_and_torch_bools_and_complex_numbers_as_it_refuses_python_ones():
    """``np.True_`` and ``torch.tensor(True)`` were logged as 1.0 (a Python bool is refused), a numpy complex lost
    its imaginary part with a ComplexWarning, a complex tensor raised torch's RuntimeError naming no figure."""
    import numpy as np
    import torch

    h = History()
    for value in (
        np.True_,
        torch.tensor(True),
        torch.tensor([False]),
        np.complex128(1 + 2j),
        1 + 2j,
        torch.tensor(1 + 2j),
        np.array(1 + 0j),
    ):
        with pytest.raises(ValueError, match="history.log: reward must be a real number, got"):
            h.log(1, reward=value)
    h.log(1, a=np.float16(0.5), b=torch.tensor(2.0, dtype=torch.bfloat16), c=np.int64(3), d=torch.tensor([4]))
    assert h.logged.to_dict("records") == [{"step": 1, "a": 0.5, "b": 2.0, "c": 3.0, "d": 4.0}]


def test_a_run_that_logged_a_steps_column_name_still_builds_its_tables(tmp_path):
    """Runs written before ``log`` refused such names: the figure keeps its own column, the steps column its own."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward([samples.cross_entropy([1, 2, 3])])
    s.optim_step().result(30)
    s.close()
    with open(tmp_path / "r" / "metrics.jsonl", "a") as fh:
        fh.write('{"step":1,"loss":0.5,"reward":1.0}\n')
    steps = History.load(tmp_path / "r").steps
    assert steps["loss (logged)"].tolist() == [0.5] and steps["reward"].tolist() == [1.0]
    assert steps["loss"].tolist() == [s.history.steps["loss"].iloc[0]]
    listing = runs(tmp_path)
    assert listing.run_id.tolist() == ["r"] and listing.error.tolist() == [None]


def test_a_run_folder_mistaken_for_its_file_or_its_runs_folder_says_which_to_give(tmp_path):
    """``History.load(".../r/ops.jsonl")`` said "ops.jsonl is not an rlnb run folder (no ops.jsonl)";
    ``History.load(runs_dir)`` said no more; ``History.load(5)`` was Path's bare TypeError; ``rlnb.runs(run_folder)``
    listed no runs at all, silently."""
    rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r").close()
    with pytest.raises(FileNotFoundError, match=r"ops.jsonl is not .*: it is a file of the run folder .*r, which Hi"):
        History.load(tmp_path / "r" / "ops.jsonl")
    with pytest.raises(FileNotFoundError, match=r"it is a folder of 1 run\(s\); load one, such as .*r, or list them"):
        History.load(tmp_path)
    with pytest.raises(TypeError, match="path must be a path .*got int: 5"):
        History.load(5)
    with pytest.raises(ValueError, match=r"runs: '.*r' is a run folder, not a folder of runs: History.load\("):
        runs(tmp_path / "r")
    assert list(runs(tmp_path).run_id) == ["r"]


def test_runs_lists_none_as_the_error_of_a_readable_run_beside_a_broken_one(tmp_path):
    rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="good").close()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ops.jsonl").mkdir()  # not a file: the run cannot be read
    listing = runs(tmp_path).set_index("run_id")
    assert listing.loc["good", "error"] is None and "is not a file" in listing.loc["bad", "error"]


def test_a_nameless_figure_and_a_runs_path_that_is_no_folder_are_refused(tmp_path):
    """adv5b: ``history.log(1, **{"": 1.0})`` made a column named ""; ``rlnb.runs("afile")`` raised a bare
    NotADirectoryError and ``rlnb.runs(5)`` a TypeError naming no argument."""
    history = History(config={})
    for name in ("", "  "):
        with pytest.raises(ValueError, match="history.log: a figure needs a name"):
            history.log(1, **{name: 1.0})
    assert history.logged.empty
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match="runs: path .*afile' is a file, not a runs folder"):
        rlnb.runs(afile)
    with pytest.raises(TypeError, match="path must be a path"):
        rlnb.runs(5)
    with pytest.raises(FileNotFoundError, match=f"runs: no folder {re.escape(repr(str(tmp_path / 'rlnb-run')))}"):
        rlnb.runs(tmp_path / "rlnb-run")  # a typo of rlnb-runs listed no runs, as if none were there


def test_the_default_runs_folder_missing_is_an_empty_listing(tmp_path, monkeypatch):
    """A notebook lists its runs before the first: ``rlnb.runs()`` of a default folder not made yet is empty, where a
    folder named that is missing is refused (``rlnb.runs("rlnb-run")``, a typo, listed nothing without a word)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    assert rlnb.runs().empty and list(rlnb.runs().columns)[:2] == ["run_id", "path"]
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "none yet"))
    assert rlnb.runs().empty
    with pytest.raises(FileNotFoundError, match=r"rlnb.runs\(\) for the default one"):
        rlnb.runs(tmp_path / "none yet")


def test_a_figure_name_that_is_not_valid_unicode_is_refused_and_an_old_run_holding_one_loads_without_it(tmp_path):
    """tnb U1: ``history.log(1, **{"a\\ud800": 1.0})`` (a lone surrogate) was kept, and from then on ``steps`` and
    ``logged`` raised UnicodeEncodeError (pyarrow's strings), in memory and in every load of the run. Now refused
    naming it; a run folder written before holds the column: loaded without it, a warning naming it, nothing else
    lost."""
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    s.forward_backward([samples.cross_entropy([1, 2, 3])])
    s.optim_step().result(30)
    with pytest.raises(ValueError, match=r"history.log: the figure name 'a\\ud800' holds a lone surrogate"):
        s.history.log(1, **{"a\ud800": 1.0}, reward=0.5)
    s.history.log(1, reward=0.5)
    assert s.history.logged.to_dict("records") == [{"step": 1, "reward": 0.5}] and len(s.history.steps) == 1
    s.close()
    with open(tmp_path / "r" / "metrics.jsonl", "a") as fh:  # as json.dumps wrote it before log refused it
        for step in (2, 3):
            fh.write(json.dumps({"step": step, "a\ud800": 1.0, "reward": 0.25}) + "\n")
    with pytest.warns(
        RuntimeWarning,
        match=r"metrics.jsonl: left out 2 value\(s\) .*'a\\ud800': a name that is not "
        r"valid Unicode text",
    ) as caught:
        h = History.load(tmp_path / "r")
    assert len([w for w in caught if "a\\ud800" in str(w.message)]) == 1
    assert h.logged.to_dict("records") == [{"step": n, "reward": r} for n, r in ((1, 0.5), (2, 0.25), (3, 0.25))]
    assert h.steps["reward"].tolist() == [0.5]
    listing = runs(tmp_path)  # listed whole: the listing does not read the figures (``history.listing``)
    assert listing.run_id.tolist() == ["r"] and listing.error[0] is None and listing.steps[0] == 1


def test_tail_takes_a_count_of_records_and_refuses_anything_else_naming_n():
    """tnb U4: ``history.tail(-1)`` gave ``[]`` in silence, ``tail(2.5)`` a bare "slice indices must be integers"."""
    import numpy as np

    s = rlnb.Session(FakeBackend(), record=False)
    s.forward_backward([samples.cross_entropy([1, 2, 3])])
    s.optim_step().result(30)
    for n in (-1, 2.5, "2", True, None):
        with pytest.raises(ValueError, match=r"^history.tail: n must be an integer >= 0, got "):
            s.history.tail(n)
    assert [r.kind for r in s.history.tail(np.int64(1))] == [wire.OperationKind.OPTIM_STEP]
    assert [r.seq for r in s.history.tail(5)] == [0, 1] and s.history.tail(0) == []
