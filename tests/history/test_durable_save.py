"""``History.save`` survives a power loss as the exports do: each file is on the disk before it is renamed into
place, and the renames are on the disk before ``save`` returns. Unsynced, a power loss right after ``save`` could
leave its files renamed into place but empty (the rename reached the disk, the text did not)."""

import os

import rlnb
from rlnb.history import History
from rlnb.sweep.folder import SETTINGS_FILE, begin
from rlnb.testing import FakeBackend


def test_save_syncs_each_file_before_its_rename_and_the_folder_after(tmp_path, monkeypatch):
    events: list[tuple[str, object]] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd):
        events.append(("sync", os.fstat(fd).st_ino))
        fsync(fd)

    def recording_replace(src, dst, *args, **kwargs):
        events.append(("rename", os.path.basename(dst)))
        replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    h = History()
    h.log(1, reward=0.5)
    folder = h.save(tmp_path / "made" / "saved")  # two folders made: their names in their parents too
    monkeypatch.undo()
    names = ["config.json", "metrics.jsonl", "ops.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == names
    renames = [e for e in events if e[0] == "rename"]
    assert sorted(n for _, n in renames) == names
    for name in names:  # renaming keeps the inode: the file synced is the one now in place
        synced = events.index(("sync", (folder / name).stat().st_ino))
        assert synced < events.index(("rename", name)), (name, events)
    last_rename = max(events.index(e) for e in renames)
    for made in (folder, folder.parent, tmp_path):  # the renames, and each folder the save made, in its parent
        assert ("sync", made.stat().st_ino) in events[last_rename:], (made, events)
    assert History.load(folder).logged.to_dict("records") == [{"step": 1, "reward": 0.5}]


def sync_and_rename_events(monkeypatch) -> list[tuple[str, object]]:
    events: list[tuple[str, object]] = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("sync", os.fstat(fd).st_ino)) or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda s, d: events.append(("rename", os.path.basename(d))) or replace(s, d))
    return events


def assert_synced_around_the_rename(events, file) -> None:
    renamed = events.index(("rename", file.name))
    assert events.index(("sync", file.stat().st_ino)) < renamed, events  # the text before the name
    assert ("sync", file.parent.stat().st_ino) in events[renamed:], events  # the name after


def test_a_recorded_runs_config_is_synced_before_its_rename_and_its_folder_after(tmp_path, monkeypatch):
    s = rlnb.Session(FakeBackend(), runs_dir=tmp_path, run_id="r")
    events = sync_and_rename_events(monkeypatch)
    s.history.annotate(label="a")
    monkeypatch.undo()
    assert_synced_around_the_rename(events, tmp_path / "r" / "config.json")
    s.close()


def test_a_sweeps_settings_are_synced_before_their_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = sync_and_rename_events(monkeypatch)
    begin(tmp_path, {"steps": 3}, resume=False)
    monkeypatch.undo()
    assert_synced_around_the_rename(events, tmp_path / SETTINGS_FILE)
