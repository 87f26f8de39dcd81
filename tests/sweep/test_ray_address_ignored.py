"""``executor="ray", address=...`` in a process already connected to a Ray: the trials run on that Ray, and the
address was ignored without a word. Ray's own connection is faked (no cluster is started): ``is_initialized`` says
yes, the runtime context names the Ray it is on, and ``cluster_resources`` ends the executor's start right after
the connection step."""

import inspect
import types
import warnings

import pytest

from rlnb.sweep.ray_executor import RayExecutor

pytestmark = pytest.mark.slow  # imports Ray


class Connected(Exception):
    """Raised where the executor asks the cluster for its resources: the connection step is over."""


@pytest.fixture
def ray_at(monkeypatch):
    """Ray, as if ``ray.init`` had connected this process to the GCS at the address given."""
    ray = pytest.importorskip("ray")

    def at(gcs: str):
        monkeypatch.setattr(ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(gcs_address=gcs))
        monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called again"))

        def resources():
            raise Connected

        monkeypatch.setattr(ray, "cluster_resources", resources)

    return at


def test_an_address_other_than_the_connected_rays_is_warned_about(ray_at, tmp_path):
    ray_at("127.0.0.1:6379")
    with (
        pytest.warns(UserWarning, match=r"address='ray://head:10001'.*127\.0\.0\.1:6379.*ray\.shutdown\(\)"),
        pytest.raises(Connected),
    ):
        RayExecutor(tmp_path, None, address="ray://head:10001")


@pytest.mark.parametrize("address", ["auto", "127.0.0.1:6379", "ray://127.0.0.1:6379", None])
def test_the_connected_rays_own_address_or_auto_is_no_warning(ray_at, tmp_path, address):
    ray_at("127.0.0.1:6379")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Connected):
            RayExecutor(tmp_path, None, address=address)


def test_a_ray_address_variable_other_than_the_connected_rays_is_warned_about(ray_at, tmp_path, monkeypatch):
    """``$RAY_ADDRESS`` set for the sweep, in a process already connected to another Ray: it was not compared, and
    the trials ran on the connected Ray without a word."""
    ray_at("127.0.0.1:6379")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    with (
        pytest.warns(UserWarning, match=r"RAY_ADDRESS='ray://head:10001' is not used.*127\.0\.0\.1:6379"),
        pytest.raises(Connected),
    ):
        RayExecutor(tmp_path, None)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # the connected Ray's own
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Connected):
            RayExecutor(tmp_path, None)


@pytest.fixture
def ray_client_at(ray_at, monkeypatch):
    """Ray, as if ``ray.init("ray://...")`` had connected this process through Ray Client (whose runtime context
    names the cluster's inner GCS address, not the one given)."""
    ray = pytest.importorskip("ray")

    def at(conn: str):
        ray_at("10.0.0.5:6379")
        client = ray.util.client.ray
        worker = types.SimpleNamespace(client_worker=types.SimpleNamespace(_conn_str=conn))
        monkeypatch.setattr(client, "is_connected", lambda: True)
        monkeypatch.setattr(client, "get_context", lambda: worker)

    return at


def test_through_ray_client_the_address_it_was_given_is_compared(ray_client_at, tmp_path):
    ray_client_at("head:10001")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(Connected):
            RayExecutor(tmp_path, None, address="ray://head:10001")
    with (
        pytest.warns(UserWarning, match=r"address='ray://other:10001'.*the Ray at ray://head:10001"),
        pytest.raises(Connected),
    ):
        RayExecutor(tmp_path, None, address="ray://other:10001")


def test_a_ray_client_whose_address_cannot_be_read_is_said_not_taken_for_another(ray_at, tmp_path, monkeypatch):
    """Ray names a Ray Client connection's address in no public API; rlnb reads its client worker's private
    ``_conn_str``. A Ray without it warned "is not used" of the very address it was connected to, naming no reason (an
    ``except Exception`` took the missing attribute for a Ray that does not say): now the warning says the address
    could not be compared, naming Ray's version and the attribute."""
    ray = pytest.importorskip("ray")
    ray_at("10.0.0.5:6379")
    client = ray.util.client.ray
    monkeypatch.setattr(client, "is_connected", lambda: True)
    monkeypatch.setattr(client, "get_context", lambda: types.SimpleNamespace(client_worker=object()))
    said = rf"address='ray://head:10001' may not be used: .*; Ray {ray.__version__} does not say the address of a Ray "
    said += r"Client connection \(rlnb reads its client worker's private _conn_str"
    with pytest.warns(UserWarning, match=said), pytest.raises(Connected):
        RayExecutor(tmp_path, None, address="ray://head:10001")


def test_the_installed_ray_keeps_the_ray_client_address_where_it_is_read():
    """The private attribute ``client_address`` reads is set by the installed Ray's client worker: an upgrade that
    drops it fails here, not silently in a user's sweep."""
    ray = pytest.importorskip("ray")
    from ray.util.client.worker import Worker

    assert "self._conn_str = conn_str" in inspect.getsource(Worker.__init__), ray.__version__
