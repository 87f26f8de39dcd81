"""What a demo killed part way (``kill -9``) left in ``--out``, finished or undone by the next, and a demo running there
(its lock held) told to the next as a running demo, never as a stopped one."""

import os

import pytest

from rlnb._files import release
from rlnb.cli import main
from rlnb.cli.demo.aside import DELETING, EARLIER, LOCK, STAGING, hold_out
from rlnb.cli.demo.files import MANIFEST, OUTPUTS, check_out, note_own_files
from rlnb.history.store import RunStore


def _files(folder):
    """Each file's bytes, but the demo lock's (its holder's pid)."""
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK}


def _earlier_demo(out):
    """An earlier demo's output: its run folder, its files, and the manifest naming them."""
    out.mkdir()
    store = RunStore(out / "run")
    store.write_op({"kind": "sample"})
    store.close()
    for name in OUTPUTS:
        (out / name).write_text(f"the earlier demo's {name}")
    note_own_files(out, ["run/", *OUTPUTS])
    return _files(out)


def test_a_set_aside_killed_part_way_is_put_back_by_the_next_demo(tmp_path):
    """``kill -9`` once the manifest (and the run) had moved: the files left in place were no demo's to the next one
    (refused, "holds files no earlier rlnb demo wrote"), and the manifest stayed aside for ever."""
    out = tmp_path / "out"
    before = _earlier_demo(out)
    (out / STAGING).mkdir()  # what a kill -9 between two moves leaves
    (out / MANIFEST).rename(out / STAGING / MANIFEST)
    (out / "run").rename(out / STAGING / "run")
    said = check_out(out, force=False)
    assert said == [f"rlnb demo: a demo stopped while it set the earlier output in {out} aside: put back in place"]
    assert _files(out) == before and not (out / STAGING).exists()


def test_a_set_aside_killed_part_way_whose_names_were_taken_since_is_kept_aside(tmp_path):
    """A file of the same name made in ``--out`` since: neither is written over; what is left is kept as an aside."""
    out = tmp_path / "out"
    _earlier_demo(out)
    (out / STAGING).mkdir()
    (out / "history.csv").rename(out / STAGING / "history.csv")
    (out / "history.csv").write_text("made since")
    (out / MANIFEST).unlink()  # the new history.csv is no demo's: left as it is, and named by the refusal
    said = check_out(out, force=True)
    assert said == [
        f"rlnb demo: a demo stopped while it set the earlier output in {out} aside: kept in {out / EARLIER}"
    ]
    assert (out / EARLIER / "history.csv").read_text() == "the earlier demo's history.csv"
    assert (out / "history.csv").read_text() == "made since" and not (out / STAGING).exists()


def test_a_deletion_a_completed_demo_left_half_done_is_finished_by_the_next(tmp_path):
    out = tmp_path / "out"
    _earlier_demo(out)
    (out / DELETING / "run").mkdir(parents=True)
    (out / DELETING / "run" / "ops.jsonl").write_text("{}\n")
    assert check_out(out, force=False) == [] and not (out / DELETING).exists()


def test_a_demo_in_the_folder_of_one_that_set_its_earlier_output_aside_is_told_it_runs(tmp_path, capsys):
    """The running demo had set the earlier output aside and not yet opened its run folder (a few milliseconds): the
    second was told "a stopped demo set aside" that output."""
    out = tmp_path / "out"
    out.mkdir()
    (out / EARLIER).mkdir()
    (out / EARLIER / "history.csv").write_text("the earlier demo's")
    note_own_files(out, ["run/"])
    held = hold_out(out)  # the running demo's lock, held from before it set anything aside
    try:
        before = _files(out)
        assert main(["demo", "--steps", "1", "--device", "cpu", "--out", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"rlnb demo: another rlnb demo is running in {out} (pid {os.getpid()}): wait for it to end or pick "
            "another --out\n"
        )
        assert _files(out) == before
    finally:
        release(held)


def test_an_out_in_a_folder_where_a_demo_keeps_earlier_output_is_refused(tmp_path):
    """A demo in ``OUT/.rlnb-demo-deleting/x`` (or through a link to it) had its output deleted by the next demo in
    ``OUT``; one in ``OUT/.rlnb-demo-setting-aside`` had it moved into ``OUT``."""
    for name in (EARLIER, f"{EARLIER}-2", STAGING, DELETING):
        folder = tmp_path / "OUT" / name
        folder.mkdir(parents=True)
        (tmp_path / f"link{name}").symlink_to(folder)
        for out in (folder / "x", folder, tmp_path / f"link{name}" / "x"):
            with pytest.raises(ValueError) as refused:
                check_out(out, force=False)
            assert str(refused.value) == (
                f"--out {out} is in {folder}, a folder where rlnb demo keeps earlier output (a later demo may move or "
                "delete it): pick another --out"
            )
    assert check_out(tmp_path / "OUT" / ".rlnb-demo-other", force=False) == []
