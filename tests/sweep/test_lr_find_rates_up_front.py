"""A range whose first rate ``base``'s decay rule refuses (learning_rate * weight_decay < 1) is refused before
anything is copied, opened or written: lr_find found it only at step 0, after the session had saved a training
checkpoint, a run folder was made and a session opened, and its error named weight_decay with the unnamed
start_lr's rate. Local and remote sessions, Muon's AdamW part, and the builder's Find LR button."""

import html
import json
from typing import Any

import httpx
import pytest

import rlnb
from rlnb.sweep import lr_find
from rlnb.widgets import OptimizerBuilder
from tests.support.server import Counter, app_client

STEADY: dict[str, Any] = {"steps": 5, "step_fn": lambda s, p, i: 1.0}


def test_a_default_start_lr_the_decay_refuses_is_refused_naming_start_lr_before_the_session_is_copied(tmp_path):
    """lr 1e-6 at weight_decay 1e5 is valid (0.1); the default start_lr, 1e-5, is not (1)."""
    runs = tmp_path / "runs"
    session = rlnb.connect("local", model="tiny", optimizer="adam", runs_dir=runs, device="cpu")
    before = set(runs.iterdir())
    base = rlnb.AdamParams(learning_rate=1e-6, weight_decay=1e5)
    said = (
        r"^lr_find: start_lr=1e-05 is refused at AdamParams\.weight_decay = 100000: learning_rate \* weight_decay must "
        r"be < 1, got 1e-05 \* 100000 = 1; the rates allowed are below 1 / weight_decay = 1e-05: give a smaller "
        r"start_lr or weight_decay$"
    )
    with pytest.raises(ValueError, match=said) as refused:
        lr_find(base, session)
    assert not isinstance(refused.value, rlnb.InvalidParams)  # the field at fault is lr_find's, not the params' own
    assert set(runs.iterdir()) == before  # no lr-find run folder
    assert session.history.path is not None
    ops = [json.loads(line)["kind"] for line in (session.history.path / "ops.jsonl").read_text().splitlines()]
    assert "training-checkpoint" not in ops
    session.close()


def test_an_explicit_start_lr_past_one_over_the_weight_decay_is_refused_before_a_fresh_session_opens(tmp_path):
    said = r"start_lr=0\.2 is refused at .*, got 0\.2 \* 10 = 2; the rates allowed are below 1 / weight_decay = 0\.1"
    with pytest.raises(ValueError, match=said):
        lr_find(rlnb.AdamParams(weight_decay=10.0), start_lr=0.2, end_lr=1.0, runs_dir=tmp_path, **STEADY)
    assert list(tmp_path.iterdir()) == []


def test_an_end_lr_past_it_still_runs_up_to_the_rate_the_decay_refuses(tmp_path):
    """The range ends before the first rate the decay refuses, by design (not refused up front)."""
    found = lr_find(rlnb.AdamParams(weight_decay=0.5), start_lr=1e-3, end_lr=10.0, runs_dir=tmp_path, **STEADY)
    assert found.lrs == pytest.approx([1e-3, 1e-2, 1e-1, 1.0]) and "stopped at lr 10" in found.reason


def test_muons_adamw_part_is_checked_at_its_own_rate_and_weight_decay(tmp_path):
    """Muon at 1e-3 (no decay), its AdamW part at 10x it with weight_decay 100: from Muon 1e-3 on the part's rate
    times its decay reaches 1; the largest Muon rate allowed is 1 / (10 * 100)."""
    base = rlnb.MuonParams(learning_rate=1e-4, weight_decay=0.0, adam={"learning_rate": 1e-3, "weight_decay": 100.0})
    said = (
        r"start_lr=0\.001 is refused at MuonParams\.adam\.weight_decay = 100: .*, got its AdamW part at 10x it: 0\.01 "
        r"\* 100 = 1; the rates allowed are below 1 / \(10 \* adam\.weight_decay\) = 0\.001:"
    )
    with pytest.raises(ValueError, match=said):
        lr_find(base, start_lr=1e-3, end_lr=1.0, runs_dir=tmp_path, **STEADY)
    assert list(tmp_path.iterdir()) == []


def test_an_end_lr_whose_muon_adamw_part_overflows_is_refused_naming_end_lr(tmp_path):
    """An AdamW part at 1e10x Muon's rate: end_lr 1e300 makes its rate inf, refused for another rule than the decay:
    end_lr is named, before anything opens (it failed mid-test)."""
    base = rlnb.MuonParams(learning_rate=1e-10, weight_decay=0.0, adam={"learning_rate": 1.0, "weight_decay": 0.0})
    with pytest.raises(
        ValueError, match=r"^lr_find: end_lr=1e\+300 is refused: MuonParams\.adam\.learning_rate = inf is invalid"
    ):
        lr_find(base, start_lr=1e-12, end_lr=1e300, runs_dir=tmp_path, **STEADY)
    assert list(tmp_path.iterdir()) == []


def counted(counter: Counter, optimizer: str) -> rlnb.Session:
    """A remote session on the app, every request it sends counted by ``counter``."""
    return rlnb.connect("http://testserver", optimizer=optimizer, base_model="rlnb/tiny", record=False,
                        transport=httpx.MockTransport(counter), max_retries=0)  # fmt: skip


@pytest.mark.slow  # the app, in process
def test_a_remote_session_saves_no_checkpoint_and_opens_no_session_before_the_refusal(tmp_path):
    with app_client(tmp_path / "ckpt") as c:
        counter = Counter(c)
        remote = counted(counter, "adam")
        opened = len(counter.sent)
        with pytest.raises(ValueError, match=r"start_lr=1e-05 is refused at AdamParams\.weight_decay"):
            lr_find(rlnb.AdamParams(learning_rate=1e-6, weight_decay=1e5), remote, runs_dir=tmp_path / "runs")
        assert counter.sent[opened:] == []  # no checkpoint saved, no resource or session made
        assert not (tmp_path / "runs").exists()
        remote.close()


@pytest.mark.usefixtures("undrawn_live_view")
def test_the_find_lr_button_shows_the_refusal_and_leaves_no_run_folder(tmp_path):
    b = OptimizerBuilder()
    b.adam["learning_rate"].value, b.adam["weight_decay"].value = 1e-6, 1e5
    assert b.valid  # the params themselves hold the rule: 1e-6 * 1e5 = 0.1
    b.lr_finder.options = {"steps": 5, "runs_dir": tmp_path}
    b.lr_finder.button.click()
    assert b.lr_finder.join(60)
    assert type(b.lr_finder.error) is ValueError and "start_lr=1e-05 is refused" in str(b.lr_finder.error)
    assert (
        "lr_find: start_lr=1e-05 is refused at AdamParams.weight_decay = 100000: learning_rate * weight_decay must"
        in html.unescape(b.lr_finder.status.value)
    )
    assert list(tmp_path.iterdir()) == []
    b.close()


@pytest.mark.slow  # the app, in process
def test_a_remote_muon_sessions_given_start_lr_is_refused_before_anything_is_sent_whatever_its_scaling(tmp_path):
    """No ``muon_scaling`` named: the default range is the service's, but a given start_lr is known; it was checked
    only once the session had been copied and a new one opened, leaving a run folder."""
    with app_client(tmp_path / "ckpt") as c:
        counter = Counter(c)
        remote = counted(counter, "muon")
        opened = len(counter.sent)
        with pytest.raises(ValueError, match=r"start_lr=0\.5 is refused at MuonParams\.weight_decay = 10"):
            lr_find(rlnb.MuonParams(learning_rate=0.01, weight_decay=10.0), remote, start_lr=0.5, steps=5,
                    runs_dir=tmp_path / "runs", transport=httpx.MockTransport(counter), max_retries=0)  # fmt: skip
        assert counter.sent[opened:] == []
        assert not (tmp_path / "runs").exists()
        remote.close()


@pytest.mark.slow  # the app, in process
def test_a_default_start_lr_known_once_the_session_opens_is_refused_and_leaves_no_run_folder(tmp_path):
    """The default start_lr is the service's scaling's (match_adam: 1e-5), refused at weight_decay 1e5 once the new
    session is open: it is closed again and its run folder, with no step in it, removed."""
    with app_client(tmp_path / "ckpt") as c:
        counter = Counter(c)
        remote = counted(counter, "muon")
        opened = len(counter.sent)
        runs = tmp_path / "runs"
        with pytest.raises(ValueError, match=r"start_lr=1e-05 is refused at MuonParams\.weight_decay = 100000"):
            lr_find(rlnb.MuonParams(learning_rate=1e-6, weight_decay=1e5), remote, steps=5, runs_dir=runs,
                    transport=httpx.MockTransport(counter), max_retries=0)  # fmt: skip
        made = [path for method, path in counter.sent[opened:] if method == "POST"]
        assert "/v1/rl/training-sessions" in made  # the deferred case: opened to learn its scaling
        assert made[-1].endswith("/stop")  # and closed again
        assert list(runs.iterdir()) == []
        remote.close()


@pytest.mark.parametrize("given", ["history", "run_id"])
def test_a_run_of_the_users_is_refused_before_anything_is_opened(tmp_path, given):
    """``history=`` made the range test record into the user's run, which a refused range then removed whole."""
    with rlnb.connect("local", runs_dir=tmp_path, run_id="mine") as mine:
        mine.history.log(0, reward=1.0)
    kept = sorted(p.name for p in (tmp_path / "mine").iterdir())
    value = mine.history if given == "history" else "mine"
    with pytest.raises(TypeError, match=f"lr_find records its range test in a run of its own .*{given}"):
        lr_find(rlnb.AdamParams(learning_rate=1e-6, weight_decay=1e5), runs_dir=tmp_path, **{given: value})
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
