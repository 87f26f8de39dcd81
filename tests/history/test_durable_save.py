"""``History.save`` survives a power loss as the exports do: each file is on the disk before it is renamed into
place, and the renames are on the disk before ``save`` returns. Unsynced, a power loss right after ``save`` could
leave its files renamed into place but empty (the rename reached the disk, the text did not)."""

import os

from rlnb.history import History


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
