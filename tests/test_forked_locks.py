"""A process forked while rlnb holds one of its folder locks (a DataLoader's workers, a ``multiprocessing`` pool on
Linux) shares the lock: closed without unlocking, it stayed held until that child exited, and rlnb's next use of the
folder was refused naming its own pid. Each lock is released with ``rlnb._files.release`` now."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlnb._files import release
from rlnb.cli.demo import files as demo_files
from rlnb.engine import held
from rlnb.history.store import RunStore, lock_run
from rlnb.server.state import Journal
from rlnb.sinks import leases
from rlnb.sweep import folder as sweep_folder

pytestmark = pytest.mark.slow  # each forks a process


@contextlib.contextmanager
def forked_child() -> Iterator[None]:
    """A child forked now that lives on (as a DataLoader worker does) until the block ends."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child: waits for the pipe to close, then leaves at once
        try:
            os.close(write)
            os.read(read, 1)
        finally:
            os._exit(0)
    os.close(read)
    try:
        yield
    finally:
        os.close(write)
        os.waitpid(child, 0)


def test_a_sweep_folder_is_not_kept_locked_by_a_child_forked_while_the_sweep_ran(tmp_path):
    """The sweep's workers forked while it ran: resuming it in the same notebook was ``RunLocked`` "by another sweep
    (pid N)", N the notebook's own."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / sweep_folder.SETTINGS_FILE).write_text("{}")
    with contextlib.ExitStack() as children:
        with sweep_folder.held(folder, resume=True):
            children.enter_context(forked_child())  # lives on past the sweep's end
        release(sweep_folder.lock(folder, resume=True))


def test_a_servers_state_dir_is_not_kept_locked_by_a_child_forked_while_it_served(tmp_path):
    """A server stopped in-process (a notebook's, a test's) and started again on its state dir was refused as "in use
    by another rlnb serve" naming its own pid, while a process it forked lived."""
    with contextlib.ExitStack() as children:
        journal = Journal(tmp_path / "state")
        children.enter_context(forked_child())
        journal.close()
        Journal(tmp_path / "state").close()


def test_an_earlier_demo_run_is_not_kept_locked_by_a_child_forked_while_it_was_cleared(tmp_path, monkeypatch):
    """A run folder the demo could not move aside (a folder it may not write) stayed locked while a child forked
    meanwhile lived: the next session on it was ``RunLocked`` naming this process."""
    run = tmp_path / "run"
    store = RunStore(run)
    store.write_op({"kind": "sample"})
    store.close()
    children = contextlib.ExitStack()

    def rename_forking(path: Path, target: Path) -> None:
        children.enter_context(forked_child())
        raise PermissionError(f"[Errno 13] Permission denied: {path!s} -> {target!s}")

    monkeypatch.setattr(demo_files.Path, "rename", rename_forking)
    with children:
        with pytest.raises(PermissionError):
            demo_files._set_aside_run(run, tmp_path / "aside")
        release(lock_run(run))


def test_a_sinks_run_claim_is_not_kept_by_a_child_forked_while_the_run_was_written(tmp_path, monkeypatch):
    """A sink's claim on its (place, run name) pair is an ``flock`` across processes: closed without unlocking, a
    child forked while the run was written kept it, and the next run of that name was refused as "being written
    there now by another session"."""
    monkeypatch.setattr(leases.tempfile, "gettempdir", lambda: str(tmp_path))
    with contextlib.ExitStack() as children:
        claim = leases.take("place", "run")
        assert claim is not None and claim.fd is not None
        children.enter_context(forked_child())
        leases.drop(claim)
        again = leases.take("place", "run")
        assert again is not None
        leases.drop(again)


@pytest.mark.parametrize("folder", [False, True], ids=["training", "inference"])
def test_a_partial_checkpoint_is_not_kept_locked_by_a_child_forked_while_it_was_written(tmp_path, folder):
    """A checkpoint's partial was closed without unlocking: a child forked while it was written (a DataLoader's
    worker) kept its lock, and a partial left behind (a save whose cleanup failed) was kept by every sweep of the
    folder as a live writer's while that child lived."""
    partial = tmp_path / (".ckpt.partial" if folder else ".ckpt.pt.partial")
    with contextlib.ExitStack() as children:
        lock = held.hold(partial, folder=folder)
        children.enter_context(forked_child())  # lives on past the save's end
        with held.unheld(partial) as dead:
            assert not dead  # held while written: the sweep would keep it
        release(lock)
        with held.unheld(partial) as dead:
            assert dead


def test_a_partial_removed_as_it_was_held_is_not_kept_locked_by_a_child_forked_meanwhile(tmp_path, monkeypatch):
    """``held.hold`` closed the descriptor it had just locked when the partial was removed under it (its error path)
    without unlocking: a child forked meanwhile kept the lock on the file's other names."""
    partial, other_name = tmp_path / ".ckpt.pt.partial", tmp_path / "other-name"
    real_take = held._take
    with contextlib.ExitStack() as children:

        def take_then_lose(fd: int) -> bool | None:
            taken = real_take(fd)
            children.enter_context(forked_child())
            os.link(partial, other_name)  # the locked file, by a name that stays
            partial.unlink()
            partial.touch()  # another file in its place: hold's check sees another inode
            return taken

        monkeypatch.setattr(held, "_take", take_then_lose)
        with pytest.raises(FileNotFoundError, match="was removed by another process as it was made"):
            held.hold(partial, folder=False)
        monkeypatch.undo()  # unheld takes locks with _take too
        with held.unheld(other_name) as dead:
            assert dead  # no lock left held by the child
