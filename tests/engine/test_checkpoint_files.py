"""Checkpoint files on the local disk under a hostile user and a hostile machine: a process killed mid-save, a
power loss after it, links and pipes put in a checkpoint's folder, files that cannot be deleted, files deleted."""

import contextlib
import errno
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import uuid

import pytest

import rlnb
from rlnb.engine import checkpoint_files
from rlnb.engine.checkpoint_files import UnsafeCheckpointFile


def local_session(**kw):
    return rlnb.connect("local", model="tiny", device="cpu", record=False, **kw)


KILLED_MID_SAVE = """
import sys, time
import rlnb
from rlnb.engine import checkpoints

def stuck(obj, fh, *args, **kwargs):
    fh.write(b"half a checkpoint")
    fh.flush()
    print("saving", flush=True)
    time.sleep(600)

checkpoints.torch.save = stuck
with rlnb.connect("local", model="tiny", device="cpu", record=False, checkpoint_dir=sys.argv[1]) as s:
    s.save_training_checkpoint().result()
"""


def _partial(name: str, pid: int, host: str = checkpoint_files._HOST) -> str:
    return f".{name}.{host}-{pid}-{uuid.uuid4().hex[:8]}.partial"


def _dead_pid() -> int:
    with subprocess.Popen(["true"]) as ended:
        pass
    return ended.pid


def test_the_partials_of_dead_processes_are_removed_when_a_store_opens_or_saves_there_and_nothing_else(tmp_path):
    """A process killed mid-save left its hidden ``.partial`` file (or folder) in ``checkpoint_dir`` for ever, a
    checkpoint's size at every kill. Opening the folder, and each save, removes those of dead processes; a live
    writer's, another machine's and the user's own files stay."""
    folder, hex12, dead = tmp_path / "ckpts", "0123456789ab", _dead_pid()
    folder.mkdir()
    gone = [folder / _partial(f"ckpt-train-{hex12}.pt", dead), folder / f".ckpt-infer-{hex12}.partial"]  # and old
    gone[0].write_bytes(b"half a checkpoint")
    (gone[1] / "merged").mkdir(parents=True)
    kept = [
        folder / _partial(f"ckpt-train-{hex12}.pt", os.getpid()),  # this process's: a save under way
        folder / _partial(f"ckpt-infer-{hex12}", os.getppid()),  # a live process's
        folder / _partial(f"ckpt-train-{hex12}.pt", dead, host="0" * 8),  # another machine's
        folder / ".notes.partial",
        folder / "ckpt-train-mine.pt.partial",
        folder / f".ckpt-train-{hex12}.pt.mine.partial",
        folder / f"ckpt-train-{hex12}.pt",
    ]
    for path in kept:
        path.write_bytes(b"the user's")
    with local_session(checkpoint_dir=folder) as s:
        assert sorted(folder.iterdir()) == sorted(kept)
        late = folder / _partial(f"ckpt-infer-{hex12}", dead)
        (late / "adapter").mkdir(parents=True)
        ckpt = s.save_training_checkpoint().result(timeout=60).checkpoint
        assert sorted(folder.iterdir()) == sorted([*kept, folder / f"{ckpt.id}.pt"])


@pytest.mark.slow  # starts a Python process
def test_a_process_killed_mid_save_leaves_a_partial_that_the_next_store_there_removes(tmp_path):
    folder = tmp_path / "ckpts"
    with subprocess.Popen([sys.executable, "-c", KILLED_MID_SAVE, str(folder)], stdout=subprocess.PIPE) as child:
        try:
            ready, _, _ = select.select([child.stdout], [], [], 120)
            assert ready and child.stdout.readline() == b"saving\n"
        finally:
            child.send_signal(signal.SIGKILL)
    (killed,) = folder.iterdir()
    host = checkpoint_files._HOST
    assert re.fullmatch(rf"\.ckpt-train-[0-9a-f]{{12}}\.pt\.{host}-{child.pid}-[0-9a-f]{{8}}\.partial", killed.name)
    with local_session(checkpoint_dir=folder):
        assert list(folder.iterdir()) == []


def test_a_save_is_fsynced_before_it_takes_the_checkpoints_name_and_the_rename_after(tmp_path, monkeypatch):
    """No file or folder was fsynced: after a power loss the renamed checkpoint could be empty or missing."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        events.append(("replace", str(src), str(dst)))
        real_replace(src, dst, *args, **kwargs)

    with local_session(checkpoint_dir=tmp_path) as s:
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        monkeypatch.undo()
        folder = s.backend.checkpoint_path(ckpt.id)
    (renamed,) = [i for i, e in enumerate(events) if e[0] == "replace" and e[2] == str(folder)]
    partial = events[renamed][1]
    before = {e[1].replace(partial, str(folder)) for e in events[:renamed] if e[0] == "fsync"}
    assert {str(p) for p in folder.rglob("*")} | {str(folder)} <= before  # every file and folder of it
    assert ("fsync", str(tmp_path)) in events[renamed + 1 :]  # the rename itself


@pytest.mark.parametrize("where", ["inside", "merged", "training"])
def test_a_symlink_in_a_checkpoint_is_refused_never_followed_by_a_download(tmp_path, where):
    """A link put in a checkpoint (``merged/x -> /etc/passwd``, ``merged/`` itself, the ``.pt``) was followed: the
    local download listed the file it leads to, outside the checkpoint."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwd").write_text("root:x:0:0")
    with local_session(checkpoint_dir=tmp_path / "ckpts") as s:
        infer = s.save_inference_checkpoint().result(timeout=60).checkpoint
        train = s.save_training_checkpoint().result(timeout=60).checkpoint
        ckpt, link = infer, s.backend.checkpoint_path(infer.id) / "merged"
        if where == "inside":
            link = link / "passwd"
        elif where == "merged":
            shutil.rmtree(link)
        else:
            ckpt, link = train, s.backend.checkpoint_path(train.id)
            link.unlink()
        link.symlink_to(secret / "passwd" if where != "merged" else secret)
        with pytest.raises(UnsafeCheckpointFile, match=rf"^checkpoint {ckpt.id}'s {link} is a symlink \(to {secret}"):
            s.backend.checkpoint_files(ckpt.id)


def test_a_pipe_in_a_checkpoint_is_refused_by_a_download_and_by_resume_never_read(tmp_path):
    """A FIFO put in an inference checkpoint's folder: the download skipped it without a word; resume from the
    folder read it, waiting for ever for a writer (here one comes after 30 s, so that the old code fails)."""
    with local_session(checkpoint_dir=tmp_path) as s:
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        folder = s.backend.checkpoint_path(ckpt.id)
        os.mkfifo(folder / "merged" / "pipe")
        with pytest.raises(UnsafeCheckpointFile, match=rf"^checkpoint {ckpt.id}'s {folder}/merged/pipe is not a "):
            s.backend.checkpoint_files(ckpt.id)
        pt = s.backend.checkpoint_path(s.save_training_checkpoint().result(timeout=60).checkpoint.id)
        pt.unlink()
        os.mkfifo(pt)
        with pytest.raises(UnsafeCheckpointFile, match=rf"'s {pt} is not a regular file"):  # it said "gone"
            s.backend.checkpoint_files(pt.stem)
    (folder / "rlnb.json").unlink()
    os.mkfifo(folder / "rlnb.json")

    def writer_at_last():
        with contextlib.suppress(OSError):  # ENXIO: no reader (the fix), nothing to unblock
            os.close(os.open(folder / "rlnb.json", os.O_WRONLY | os.O_NONBLOCK))

    unblock = threading.Timer(30, writer_at_last)
    unblock.start()
    try:
        with pytest.raises(ValueError, match=r"its .*rlnb.json is not a regular file \(a pipe, a device, a socket\)"):
            local_session(resume_from=folder)
    finally:
        unblock.cancel()


def test_a_checkpoint_that_cannot_be_deleted_is_named_and_kept(tmp_path, monkeypatch):
    """``discard_checkpoint`` ignored every error of the delete: the checkpoint left the session's lists while its
    files, GBs, stayed on the disk without a word."""
    real_unlink = os.unlink

    def refused(path, *args, **kwargs):
        if os.fspath(path) == "config.json":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_unlink(path, *args, **kwargs)

    with local_session(checkpoint_dir=tmp_path) as s:
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        monkeypatch.setattr(os, "unlink", refused)
        said = rf"^\[Errno 13\] checkpoint {ckpt.id} could not be deleted: {tmp_path}/{ckpt.id}/merged/config.json: "
        with pytest.raises(PermissionError, match=said):
            s.backend.discard_checkpoint(ckpt.id)
        monkeypatch.undo()
        assert [c.id for c in s.info().inference_checkpoints] == [ckpt.id]
        s.backend.discard_checkpoint(ckpt.id)  # mended: it goes
        assert s.info().inference_checkpoints == [] and list(tmp_path.iterdir()) == []


def test_a_checkpoint_whose_name_was_made_a_link_is_discarded_without_touching_what_it_leads_to(tmp_path):
    """Discard of a checkpoint folder replaced by a link to another folder failed inside rmtree ("Cannot call
    rmtree on a symbolic link") and said nothing: the link stayed, the checkpoint left the lists."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("the user's")
    with local_session(checkpoint_dir=tmp_path / "ckpts") as s:
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        path = s.backend.checkpoint_path(ckpt.id)
        shutil.rmtree(path)
        path.symlink_to(elsewhere)
        s.backend.discard_checkpoint(ckpt.id)
        assert not path.is_symlink() and (elsewhere / "keep.txt").read_text() == "the user's"


def test_a_checkpoint_folder_replaced_by_a_file_is_gone_not_served(tmp_path):
    """An inference checkpoint's folder replaced by a file: the download served that file as the checkpoint."""
    with local_session(checkpoint_dir=tmp_path) as s:
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        path = s.backend.checkpoint_path(ckpt.id)
        shutil.rmtree(path)
        path.write_text("not a checkpoint")
        with pytest.raises(FileNotFoundError, match=rf"^checkpoint {ckpt.id}'s files are gone from {tmp_path}$"):
            s.backend.checkpoint_files(ckpt.id)


@pytest.mark.slow  # LoRA: peft
def test_a_deleted_adapter_of_a_lora_checkpoint_is_said_to_be_gone(tmp_path):
    """A LoRA inference checkpoint's ``adapter/`` deleted: the download said the variant "exists only for LoRA
    sessions", to a LoRA session."""
    with local_session(lora={"rank": 2}, checkpoint_dir=tmp_path) as s:
        ckpt = s.save_inference_checkpoint().result(timeout=60).checkpoint
        assert s.backend.checkpoint_files(ckpt.id, "adapter")
        shutil.rmtree(s.backend.checkpoint_path(ckpt.id) / "adapter")
        with pytest.raises(FileNotFoundError, match=rf"^checkpoint {ckpt.id}'s files \(adapter/\) are gone from "):
            s.backend.checkpoint_files(ckpt.id, "adapter")


def test_a_checkpoint_dir_replaced_by_a_file_is_said_to_be_no_folder(tmp_path):
    """``checkpoint_dir`` deleted and a file put in its place mid-session: the save failed with mkdir's
    ``FileExistsError: [Errno 17] File exists``, as if the folder were there."""
    folder = tmp_path / "ckpts"
    with local_session(checkpoint_dir=folder) as s:
        folder.rmdir()
        folder.write_text("a file")
        said = rf"NotADirectoryError: \[Errno 20\] checkpoint_dir '{folder}' is no longer a folder \(a file was put"
        with pytest.raises(rlnb.OperationFailed, match=said):
            s.save_training_checkpoint().result(timeout=60)
        assert folder.read_text() == "a file"


def test_a_leftover_partial_that_cannot_be_removed_is_named_and_the_save_goes_on(tmp_path, monkeypatch):
    """A dead process's partial that could not be removed (a permission) failed the save that found it."""
    leftover = tmp_path / _partial(f"ckpt-train-{'0' * 12}.pt", _dead_pid())
    leftover.write_bytes(b"half")
    real_unlink = os.unlink

    def refused(path, *args, **kwargs):
        if os.fspath(path) == str(leftover):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", refused)
    said = rf"^a partial checkpoint .* could not be removed: {leftover}: Permission"
    with pytest.warns(RuntimeWarning, match=said), local_session(checkpoint_dir=tmp_path) as s:
        assert s.save_training_checkpoint().result(timeout=60).checkpoint.step == 0
    assert leftover.exists()


def test_a_checkpoint_dir_that_can_be_written_but_not_listed_still_takes_checkpoints(tmp_path, monkeypatch):
    """A folder of mode ``-wx`` (written, not listed): looking for leftovers there would fail every connect."""
    real_iterdir = type(tmp_path).iterdir

    def unlisted(path):
        if path == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_iterdir(path)

    monkeypatch.setattr(type(tmp_path), "iterdir", unlisted)
    said = rf"^checkpoint_dir '{tmp_path}' cannot be listed \(Permission denied\): partial checkpoints"
    with pytest.warns(RuntimeWarning, match=said), local_session(checkpoint_dir=tmp_path) as s:
        ckpt = s.save_training_checkpoint().result(timeout=60).checkpoint
        assert s.backend.checkpoint_path(ckpt.id).is_file()


def test_a_sessions_own_temporary_folder_goes_at_close_unless_a_checkpoint_is_left_in_it(tmp_path, monkeypatch):
    """Find LR saves a checkpoint to copy the session and deletes it: its empty ``rlnb-checkpoints-*`` folder stayed
    for good (356 on the machine of the tester who found it). The folder a session made for itself now goes at
    close when nothing is left in it; one holding a checkpoint the user saved stays, as does a folder they named."""
    import tempfile

    from rlnb.sweep import lr_find

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with rlnb.connect("local", record=False, threads=1) as s:
        lr_find(rlnb.AdamParams(), s, steps=5)
    assert list(tmp_path.glob("rlnb-checkpoints-*")) == []
    with rlnb.connect("local", record=False, threads=1) as s:
        s.save_training_checkpoint().result(60)
    (kept,) = tmp_path.glob("rlnb-checkpoints-*")
    assert len(list(kept.iterdir())) == 1
    named = tmp_path / "mine"
    with rlnb.connect("local", record=False, threads=1, checkpoint_dir=named) as s:
        lr_find(rlnb.AdamParams(), s, steps=5)
    assert named.is_dir()


def test_a_default_folder_session_removes_the_dead_partials_in_the_other_sessions_default_folders(
    tmp_path, monkeypatch
):
    """A kernel killed mid-save with the default ``checkpoint_dir`` left its partial, a checkpoint's size, in its own
    ``rlnb-checkpoints-*`` folder for good: no session reopens another's random folder. A session that makes its own
    folder removes the dead processes' partials in the others; a live writer's, a saved checkpoint, another folder's
    files and the folders themselves stay."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hex12, dead = "0123456789ab", _dead_pid()
    killed, live, other = tmp_path / "rlnb-checkpoints-k1ll3d", tmp_path / "rlnb-checkpoints-l1ve", tmp_path / "mine"
    for folder in (killed, live, other):
        folder.mkdir()
    gone = [killed / _partial(f"ckpt-train-{hex12}.pt", dead), killed / _partial(f"ckpt-infer-{hex12}", dead)]
    gone[0].write_bytes(b"half a checkpoint")
    (gone[1] / "merged").mkdir(parents=True)
    kept = [
        killed / f"ckpt-train-{hex12}.pt",  # saved whole before the kill
        live / _partial(f"ckpt-train-{hex12}.pt", os.getppid()),  # a live session's save under way
        other / _partial(f"ckpt-train-{hex12}.pt", dead),  # not a session's own folder
    ]
    for path in kept:
        path.write_bytes(b"kept")
    with local_session() as s:
        assert all(path.exists() for path in gone)  # nothing is looked at before the session makes its folder
        ckpt = s.save_training_checkpoint().result(timeout=60).checkpoint
        (own,) = set(tmp_path.glob("rlnb-checkpoints-*")) - {killed, live}
        assert [p.name for p in own.iterdir()] == [f"{ckpt.id}.pt"]
    assert not any(path.exists() for path in gone) and all(path.exists() for path in kept)
