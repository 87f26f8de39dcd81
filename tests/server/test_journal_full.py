"""A journal that could not be written once (a full disk) while ``rlnb serve --state-dir`` serves: it stopped writing
for good, so everything after it was lost at the next start, and the checkpoints saved once the disk had room again
were deleted as "saved as the server was killed, before it was journaled". It is written again once it can be."""

import errno
import logging

import pytest

from rlnb.server import state
from tests.support.server import Clock, app_client, new_session, submit, wait


class FullDisk:
    """Stands for the journal's file while its disk is full: every write fails with ENOSPC until ``room``, and so does
    the rewrite's new file (``state.write_new``)."""

    def __init__(self, journal, monkeypatch):
        self.fh, self.room = journal._fh, False
        journal._fh = self
        real = state.write_new

        def write_new(path, data, **kw):
            if not self.room:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(path, data, **kw)

        monkeypatch.setattr(state, "write_new", write_new)

    def write(self, text: str) -> int:
        if not self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.fh.write(text)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


@pytest.mark.slow  # saves a checkpoint and starts the app twice
def test_a_journal_that_failed_on_a_full_disk_is_written_again_and_loses_nothing(tmp_path, monkeypatch, caplog):
    state_dir, clock = tmp_path / "state", Clock()
    with caplog.at_level(logging.INFO, "rlnb"), app_client(tmp_path / "ckpt", state_dir=state_dir, clock=clock) as c:
        _, sid = new_session(c)
        disk = FullDisk(c.app.state.registry.journal, monkeypatch)
        sync = {"weight_sync_type": "WEIGHT_SYNC_TYPE_SYNCHRONOUS"}
        wait(c, sid, "weights-sync", submit(c, sid, "weights-sync", sync)["id"])
        assert any("cannot write its state" in r.getMessage() for r in caplog.records)
        clock.now += 60  # a retry while the disk is still full fails again, quietly
        c.patch(f"/training-sessions/{sid}", json={"display_name": "while full"})
        disk.room = True  # space again (a log rotated, a file removed)
        clock.now += 60
        saved = wait(c, sid, "inference-checkpoint", submit(c, sid, "inference-checkpoint")["id"])
        cid = saved["output"]["checkpoint"]["id"]
        said = [r.getMessage() for r in caplog.records]
        assert sum("cannot write its state" in m for m in said) == 1  # once, though the retry while full failed too
        assert any("writes its state to" in m and "again" in m for m in said)
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:  # the restart knows all of it
        assert c.get(f"/checkpoints/{cid}").status_code == 200
        download = c.get(f"/checkpoints/{cid}/download", params={"variant": "CHECKPOINT_VARIANT_MERGED"})
        assert download.status_code == 200 and download.json()["data"]
        session = c.get(f"/training-sessions/{sid}").json()
        assert session["display_name"] == "while full"
        assert [ck["id"] for ck in session["inference_checkpoints"]] == [cid]


def test_a_journal_still_failing_at_the_stop_gets_a_last_try(tmp_path, monkeypatch):
    """A stop soon after the disk had room again (before the next retry) wrote nothing: the restart lost the changes."""
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir, clock=Clock()) as c:
        _, sid = new_session(c)
        disk = FullDisk(c.app.state.registry.journal, monkeypatch)
        c.patch(f"/training-sessions/{sid}", json={"display_name": "first"})  # fails: the journal is failed
        c.patch(f"/training-sessions/{sid}", json={"display_name": "full"})  # its retry fails: the next is 30 s away
        disk.room = True
        c.patch(f"/training-sessions/{sid}", json={"display_name": "second"})  # before the retry is due
    with app_client(tmp_path / "ckpt", state_dir=state_dir) as c:
        assert c.get(f"/training-sessions/{sid}").json()["display_name"] == "second"
