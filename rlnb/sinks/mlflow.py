"""MLflow: one MLflow run per rlnb run in an experiment, through ``MlflowClient``.

The store is MLflow's own default unless given (``default_uri``): ``$MLFLOW_TRACKING_URI``, else ``./mlruns`` if it
holds an experiment, else the SQLite file ``./mlflow.db`` (MLflow 3.7 on; it keeps its ``./mlruns`` file store in
maintenance mode), as MLflow itself finds it where imported. A plain path is
taken as a SQLite file. The config goes in as params, each batch as one ``log_batch``, failures as
tags ``rlnb.failure.<seq>``; names MLflow refuses are cleaned (``key``: characters, and a length past 250). View with
``mlflow ui --backend-store-uri <uri>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit
from urllib.request import url2pathname

from rlnb.sinks.base import FLUSH_INTERVAL, Failure, Point, RunInfo, Sink, scrub
from rlnb.sinks.watched import Watched, lost_from, refuse_link

BATCH_METRICS, BATCH_PARAMS, BATCH_TAGS = 1000, 100, 100
"""MLflow's limits per ``log_batch`` call."""
MAX_PARAM, MAX_TAG = 6000, 8000
"""MLflow's longest param and tag values (characters)."""
MAX_KEY = 250
"""MLflow's longest metric or param name (characters): a longer one fails the whole batch, and would drop the sink."""


def key(name: str) -> str:
    """``name`` as MLflow accepts it: characters other than letters, digits, ``_ - . / :`` and space
    become ``_`` (``reward@k`` → ``reward_k``), and a name that is not a clean relative path
    (``a//b``, ``../x``) has its slashes replaced too. A name past ``MAX_KEY`` characters is cut, and ends in
    ``-`` and 8 hex digits of the whole name's hash, so that two long names that start alike stay two metrics."""
    clean = re.sub(r"[^\w.\- /:]", "_", name)
    if posixpath.normpath(clean) != clean or clean.startswith(("/", ".")):
        clean = clean.replace("/", "_").lstrip(".") or "_"
    return hashed(clean, name) if len(clean) > MAX_KEY else clean


def hashed(clean: str, name: str) -> str:
    """``clean`` cut to end in ``-`` and 8 hex digits of ``name``'s hash, within ``MAX_KEY`` characters."""
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return clean[: MAX_KEY - 9].rstrip("/") + "-" + digest


class Keys:
    """One run's names as MLflow keys (``key``), each its own: two names cleaned alike (``a@b`` and ``a_b``, ``%`` and
    ``..``) were one MLflow metric, both figures' values at each step mixed in it (a param: a batch MLflow refused,
    which dropped the sink). The later name of such a pair ends in its own hash (``a_b-1c2d3e4f``)."""

    def __init__(self) -> None:
        self._key: dict[str, str] = {}
        self._name: dict[str, str] = {}  # whose each key is

    def __call__(self, name: str) -> str:
        found = self._key.get(name)
        if found is None:
            found = key(name)
            if self._name.setdefault(found, name) != name:
                found = hashed(found, name)
                self._name[found] = name
            self._key[name] = found
        return found


def store_uri(where: str | Path | None) -> str | None:
    """None stays MLflow's default; ``scheme://...`` is kept; a plain path is a SQLite file (its ``%``, ``?`` and ``#``
    quoted, as SQLAlchemy reads the URI's path: ``50%41.db`` was the file ``50A.db``, ``a?b.db`` the file ``a``)."""
    if where is None:
        return None
    if not isinstance(where, str | os.PathLike) or not str(where):
        error = TypeError if not isinstance(where, str | os.PathLike) else ValueError
        raise error(
            f"MLflow.tracking_uri must be None (MLflow's default store), a URI or a SQLite file path, got {where!r}"
        )
    text = str(where)
    if "://" in text or text.startswith(("databricks", "file:")):
        return text
    path = Path(text).expanduser()  # resolve() followed a link to nothing to its target, or raised "Symlink loop"
    refuse_link("MLflow.tracking_uri", path.parent)
    return f"sqlite:///{quote(str(path.resolve()))}"


def default_uri() -> str:
    """MLflow's default store: MLflow's own answer (``mlflow.get_tracking_uri``) where MLflow is imported already (an
    in-process sink imports it when made), whatever its version; else ``as_mlflow_finds``, without importing MLflow
    (2 s, which a sink writing from its child never pays in the parent)."""
    mlflow = sys.modules.get("mlflow")
    get = getattr(mlflow, "get_tracking_uri", None)
    return str(get()) if callable(get) else as_mlflow_finds()


def as_mlflow_finds() -> str:
    """MLflow's default store as MLflow 3.7 and later find it (``get_tracking_uri``; before 3.7 it was ``./mlruns``
    always): ``$MLFLOW_TRACKING_URI`` (``mlflow.set_tracking_uri`` sets it too), else ``./mlruns`` if it holds an
    experiment (a folder named by digits holding a ``meta.yaml``: MLflow keeps an existing file store), else
    ``./mlflow.db``. The one copy of MLflow's rule in rlnb, tested against MLflow's own."""
    if uri := os.environ.get("MLFLOW_TRACKING_URI"):
        return uri
    with contextlib.suppress(OSError), os.scandir("mlruns") as entries:
        if any(e.is_dir() and e.name.isdigit() and os.path.lexists(Path(e.path, "meta.yaml")) for e in entries):
            return Path("mlruns").resolve().as_uri()
    return store_uri("mlflow.db") or ""


def store(uri: str | None) -> str:
    """One spelling of the store that ``MLflow.tracking_uri`` names, to tell two sinks of one store apart from two
    stores: MLflow's default (None), its path, relative or absolute, and ``sqlite:///`` or ``file:`` URIs of one file
    are all ``sqlite:`` or ``file:`` and the file's real path; a server's URI stays as given."""
    uri = default_uri() if uri is None else uri
    path = local_store(uri)
    if path is None:
        return uri
    return f"{'sqlite' if uri.startswith('sqlite:') else 'file'}:{os.path.realpath(path)}"


def local_store(uri: str) -> Path | None:
    """The file or folder of a store on this machine: a SQLite file (``sqlite:///x.db`` relative, ``sqlite:////x.db``
    absolute, its path unquoted as SQLAlchemy does), a ``file:`` store's folder (a scheme-less URI is one too, to
    MLflow); None for a server or an in-memory database."""
    if uri.startswith("sqlite:"):
        path = unquote(uri.removeprefix("sqlite:///").partition("?")[0]) if uri.startswith("sqlite:///") else ""
        return Path(path) if path not in ("", ":memory:") else None
    if uri.startswith("file:"):
        return Path(url2pathname(urlsplit(uri).path))  # file:x, file:///abs/x, file://localhost/abs/x
    return Path(uri) if "://" not in uri and not uri.startswith("databricks") else None


class MLflow(Sink):
    """``MLflow(tracking_uri=None, experiment="rlnb")``: a URI (``http://host:5000``,
    ``sqlite:///runs.db``) or a SQLite file path; None for MLflow's default store."""

    library = "mlflow"
    extra = "mlflow"

    def __init__(
        self,
        tracking_uri: str | Path | None = None,
        experiment: str = "rlnb",
        *,
        interval: float = FLUSH_INTERVAL,
        process: bool | None = None,
    ):
        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"MLflow.experiment = {experiment!r} is invalid: must be a non-empty name")
        self.tracking_uri = store_uri(tracking_uri)
        self.experiment = experiment
        self._client: Any = None
        self._experiment_id: str | None = None
        self._open_lock = threading.Lock()
        remote = (self.tracking_uri or "").startswith(("http://", "https://", "databricks"))
        super().__init__(interval=interval, process=not remote if process is None else process)

    def spec(self) -> tuple[str, str, dict[str, Any]]:
        """How a child process makes this sink again (``process=True``): with MLflow's default store as this process
        found it (``default_uri``), so that the child writes where this sink's place says, whatever its MLflow's own
        default (``./mlruns`` before MLflow 3.7)."""
        uri = self.tracking_uri or default_uri()
        return __name__, "MLflow", {"tracking_uri": uri, "experiment": self.experiment, "interval": self.interval}

    def where(self) -> dict[str, Any]:
        """The store (``store``: ``MLflow()`` and ``MLflow("mlflow.db")`` are one) and the experiment; a server's
        password left out (``scrub``): the place is shown in a refusal."""
        return {"store": scrub(store(self.tracking_uri)), "experiment": self.experiment}

    def folder(self) -> tuple[str, Path] | None:
        """The folder of a store on this machine (a SQLite file's, a ``file:`` store), checked when the sink is made;
        None for a server."""
        uri = self.tracking_uri or default_uri()
        path = local_store(uri)
        if path is None:
            return None
        field = "MLflow.tracking_uri" if self.tracking_uri else "MLflow's default store"
        return field, path.parent if uri.startswith("sqlite:") else path

    def _load(self) -> None:
        from mlflow import MlflowClient  # noqa: F401

    def prepare(self) -> None:
        """One client and experiment for every run of this sink (a sweep's trials); a new SQLite
        store creates its tables here (~1.5 s)."""
        from mlflow import MlflowClient

        with self._open_lock:
            if self._client is None:
                self._client = MlflowClient(tracking_uri=self.tracking_uri)
            if self._experiment_id is None:
                self._experiment_id = self._experiment(self._client)

    def _find(self, name: str) -> Any:
        """The latest active MLflow run named ``name`` in the experiment (a deleted one is not), or None."""
        assert self._experiment_id is not None
        quote = "'" if "'" not in name else '"'
        if quote in name:  # no filter string can quote it: every run of the experiment, compared here
            found: list[Any] = []
            token: str | None = None
            while not found and (token or token is None):  # page by page (1000 runs each)
                page = self._client.search_runs([self._experiment_id], page_token=token)
                found, token = [r for r in page if r.info.run_name == name], page.token or ""
        else:
            where = f"attributes.run_name = {quote}{name}{quote}"
            found = self._client.search_runs([self._experiment_id], filter_string=where, max_results=1)
        return found[0] if found else None

    def holds(self, run: RunInfo) -> str | None:
        """An active MLflow run of that name in the experiment (a deleted one is not)."""
        found = self._find(run.name)
        if found is None:
            return None
        run_id = found.info.run_id
        return (f"as MLflow run {run_id} of experiment {self.experiment!r}: delete it (mlflow runs delete --run-id "
                f"{run_id}) to export it again, or export to another experiment")  # fmt: skip

    def open(self, run: RunInfo) -> _Writer:
        """Start the library's run for ``run``; called on the sink's own thread, as it may be slow."""
        self.prepare()
        assert self._experiment_id is not None
        return _Writer(self._client, self._experiment_id, run, self._find(run.name) if run.continued else None)

    def _experiment(self, client: Any) -> str:
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self.experiment)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(client.create_experiment(self.experiment))
        except MlflowException:  # another process created it first
            found = client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return str(found.experiment_id)


class _Writer:
    def __init__(self, client: Any, experiment_id: str, run: RunInfo, earlier: Any = None):
        """``earlier``: the MLflow run of an earlier session of this run, written on into (a second MLflow run of one
        name held each session's steps apart); its params keep their values (MLflow refuses to change one)."""
        from mlflow.entities import Metric, Param, RunTag

        self._client, self._metric, self._tag = client, Metric, RunTag
        tags = dict(run.tags) | ({"rlnb.sweep": run.group} if run.group else {})
        if earlier is None:
            self.run_id: str = client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
        else:
            self.run_id = earlier.info.run_id
            client.update_run(self.run_id, status="RUNNING")
        kept = earlier.data.params if earlier is not None else {}
        self._store = Watched(local_store(str(client.tracking_uri)))
        self._keys, names = Keys(), Keys()  # a param and a metric may share a name
        named = ((names(k), v) for k, v in run.params.items())
        params = [Param(k, str(v)[:MAX_PARAM]) for k, v in named if k not in kept]
        for i in range(0, len(params), BATCH_PARAMS):
            client.log_batch(self.run_id, params=params[i : i + BATCH_PARAMS])

    def write(self, points: list[Point], failures: list[Failure]) -> None:
        self._store.check(lost_from(points, failures))
        metrics = [
            self._metric(self._keys(name), value, int(point.time * 1000), point.step)
            for point in points
            for name, value in point.values.items()
        ]
        for i in range(0, len(metrics), BATCH_METRICS):
            self._client.log_batch(self.run_id, metrics=metrics[i : i + BATCH_METRICS])
        tags = [self._tag(f"rlnb.failure.{f.seq}", f.text()[:MAX_TAG]) for f in failures]
        for i in range(0, len(tags), BATCH_TAGS):
            self._client.log_batch(self.run_id, tags=tags[i : i + BATCH_TAGS])

    def close(self) -> None:
        self._store.check("the run's end (its FINISHED status) was")
        self._client.set_terminated(self.run_id, "FINISHED", end_time=int(time.time() * 1000))
