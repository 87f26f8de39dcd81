"""What the sink test modules share: the module-scoped ``env`` fixture that points every sink library at a temporary
folder (import it, with ``pytestmark``, into each module that writes through a library), the run each test trains and
how the sinks' copies of it are read back and compared."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from rlnb import samples, sinks
from rlnb.history import History
from rlnb.sinks import stream
from rlnb.sinks.base import Failure, Point, RunInfo, Sink
from tests.support import sink_readers as read

pytestmark = pytest.mark.filterwarnings(
    "ignore:The ``noload`` loader strategy is deprecated"  # SQLAlchemy 2.1, inside MlflowClient's reads
)


ROOT = Path(__file__).resolve().parents[2]


CE = [samples.cross_entropy(list(b"hello world"))]


LOADED_MACHINE_TIMEOUT = 300.0
"""Seconds a sink may take to close here instead of ``CLOSE_TIMEOUT``."""


def _tree(path: Path) -> list[str] | None:
    return sorted(str(p) for p in path.rglob("*")) if path.exists() else None


@pytest.fixture(scope="module", autouse=True)
def env(tmp_path_factory, sink_env):
    """Every library's state under one temporary folder; nothing new in $HOME or the repo after."""
    root = tmp_path_factory.mktemp("sink-libs")
    home = Path.home()
    watched = [
        home / ".cache" / "wandb",
        home / ".config" / "wandb",
        home / ".config" / "mlflow",
        home / ".cache" / "huggingface" / "trackio",
        *(ROOT / name for name in ("wandb", "mlflow.db", "mlruns", "mlartifacts", "runs")),
    ]
    before = {p: _tree(p) for p in watched}
    variables = {
        "HOME": root / "home",
        "XDG_CACHE_HOME": root / "cache",
        "XDG_CONFIG_HOME": root / "config",
        "XDG_DATA_HOME": root / "data",
        "HF_HOME": root / "hf",
        **sink_env,  # TRACKIO_DIR, WANDB_DIR, ...: the session's, in case a test before imported Trackio
    }
    with pytest.MonkeyPatch.context() as mp:
        for name, value in variables.items():
            mp.setenv(name, str(value))
        # MLflow's child may take more than the default 30 s to start and close on a busy machine; no test
        # but test_close_gives_up_on_a_sink_that_hangs is about that deadline
        mp.setattr(stream, "CLOSE_TIMEOUT", LOADED_MACHINE_TIMEOUT)
        mp.setattr(stream, "EXIT_TIMEOUT", LOADED_MACHINE_TIMEOUT)
        yield root
        if "wandb" in sys.modules:
            sys.modules["wandb"].teardown()  # stops the wandb-core process this module started
    assert {p: _tree(p) for p in watched} == before


def expected(history: History) -> dict[int, dict[str, float]]:
    """``history.steps`` as the sinks should have it: one point per step, missing figures absent."""
    out = {}
    for row in history.steps.drop(columns="weights_version").to_dict("records"):
        step = int(row.pop("step"))
        out[step] = {k: float(v) for k, v in row.items() if not pd.isna(v)}
    return out


def assert_points(got, want, where=""):
    assert sorted(got) == sorted(want), where
    for step, values in want.items():
        assert got[step] == pytest.approx(values, rel=1e-6, abs=2e-6), (where, step)


def trackio_db(project: str) -> Path:
    import trackio.utils

    assert Path(os.environ["TRACKIO_DIR"]) == trackio.utils.TRACKIO_DIR  # not $HF_HOME or ~/.cache
    return trackio.utils.TRACKIO_DIR / f"{project}.db"


def read_all(where: Path, name: str, project: str, mlflow_db: Path | None = None):
    """(library, params, points, events) for each of the four sinks of ``four(where, project)``."""
    out = [("tensorboard", *read.tensorboard(where / "tb" / name))]
    params, points, events, status = read.mlflow(f"sqlite:///{mlflow_db or where / 'mlflow.db'}", project, name)
    assert status == "FINISHED"
    out.append(("mlflow", params, points, events))
    runs = [d for d in (where / "wb" / "wandb").glob("offline-run-*") if _wandb_name(d) == name]
    assert len(runs) == 1
    config, points, events, exit_code = read.wandb(runs[0])
    assert exit_code == 0
    out.append(("wandb", config, points, events))
    out.append(("trackio", *read.trackio(trackio_db(project), name)))
    return out


def _wandb_name(run_dir: Path) -> str | None:
    for record in read.wandb_records(next(run_dir.glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "run":
            return record.run.display_name
    return None


def four(where: Path, project: str, mlflow: Sink | None = None) -> list[Sink]:
    return [
        sinks.TensorBoard(where / "tb"),
        mlflow or sinks.MLflow(where / "mlflow.db", project),
        sinks.WandB(project, dir=where / "wb"),
        sinks.Trackio(project),
    ]


class Flaky(Sink):
    """A sink whose library fails on the ``fail_at``-th write with ``error``."""

    library = "json"
    extra = "none"

    def __init__(self, fail_at: int, error: BaseException, **kw):
        self.fail_at, self.exc, self.writes, self.closed = fail_at, error, [], False
        super().__init__(**kw)

    def spec(self):
        raise NotImplementedError

    def open(self, run: RunInfo):
        return self

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        if len(self.writes) + 1 == self.fail_at:
            raise self.exc
        self.writes.append(points)

    def close(self) -> None:
        self.closed = True


FAILS_AFTER_CLOSE_SCRIPT = """
import threading, warnings
from rlnb.history import History
from rlnb.sinks import attach
from rlnb.sinks.base import Sink

go = threading.Event()

class Late(Sink):
    library, extra = "json", "none"
    def spec(self): raise NotImplementedError
    def open(self, run): return self
    def write(self, points, failures): pass
    def close(self):
        go.wait(60)
        raise OSError("disk gone at close")

history = History()
attachment = attach(history, [Late(interval=0)])
history.log(1, reward=1.0)
with warnings.catch_warnings(record=True):
    attachment.close(timeout=0.2)  # missed: said here ("did not finish writing"), the writer left running
go.set()
attachment._channels[0].thread.join(60)  # it fails now, after its close: nothing touches the history again
print("ready", flush=True)
"""


MAKERS: dict[str, tuple[str, Callable[[Path], Sink]]] = {  # the field named, and the sink writing under ``where``
    "tensorboard": ("TensorBoard.logdir", lambda where: sinks.TensorBoard(where)),
    "mlflow": ("MLflow.tracking_uri", lambda where: sinks.MLflow(where / "m.db", process=True)),
    "wandb": ("WandB.dir", lambda where: sinks.WandB("p", dir=where.parent, process=True)),  # it writes in <dir>/wandb
    "trackio": ("$TRACKIO_DIR", lambda where: sinks.Trackio("p", process=True)),  # process: Trackio not imported
}
"""``process=True``: the library is not imported in this process (a fast test); the folder is checked all the same."""
