"""``rlnb demo``'s earlier output, set aside in ``EARLIER`` while a new run trains: a stop while it is being set
aside leaves it as it was."""

import os

import pytest

from rlnb.cli.demo import files as demo_files
from rlnb.cli.demo.files import EARLIER, MANIFEST, check_out, note_own_files, set_aside_earlier_output
from rlnb.history.store import RunStore
from tests.support.pipes import refusal_in_time


def _earlier_demo(out):
    """An earlier demo's output: its run folder, its files, and the manifest naming them."""
    out.mkdir()
    store = RunStore(out / "run")
    store.write_op({"kind": "sample"})
    store.close()
    for name in demo_files.OUTPUTS:
        (out / name).write_text(f"the earlier demo's {name}")
    note_own_files(out, ["run/", *demo_files.OUTPUTS])
    return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "stop, raised",
    [(KeyboardInterrupt(), KeyboardInterrupt), (PermissionError(13, "Permission denied"), ValueError)],
)
def test_a_stop_while_the_earlier_output_is_set_aside_leaves_it_in_place(tmp_path, monkeypatch, stop, raised):
    """A Ctrl-C, or a move that failed (a ``ValueError`` then: "cannot set the earlier demo's files ... aside"): the
    manifest had gone into ``EARLIER`` and the rest stayed, so the next demo refused the folder, and the one after
    that, once ``EARLIER`` was deleted as told, found files of no demo's (the manifest was in it)."""
    out = tmp_path / "out"
    before = _earlier_demo(out)

    def interrupted(run, aside):
        raise stop

    monkeypatch.setattr(demo_files, "_set_aside_run", interrupted)
    with pytest.raises(raised):
        set_aside_earlier_output(out, force=False)
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert not (out / EARLIER).exists() and (out / MANIFEST).exists()


def test_the_manifest_is_never_written_through_a_link_left_under_its_temporary_name(tmp_path):
    """A link planted (or copied) as ``.rlnb-demo.json.tmp``: the demo wrote its manifest into the file it named."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "precious").write_text("the user's")
    (out / (MANIFEST + ".tmp")).symlink_to(tmp_path / "precious")
    with pytest.raises(ValueError, match="cannot write the demo's files in .*: .* is a symbolic link"):
        set_aside_earlier_output(out, force=False)
    assert (tmp_path / "precious").read_text() == "the user's" and not (out / MANIFEST).exists()


def test_a_manifest_that_is_a_named_pipe_stops_the_demo_naming_it(tmp_path):
    """Reading a ``.rlnb-demo.json`` that is a named pipe waited for ever: ``rlnb demo`` hung before training."""
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / MANIFEST)
    for force in (False, True):
        err = refusal_in_time(lambda force=force: check_out(out, force), out / MANIFEST, ValueError)
        assert str(err) == f"{out / MANIFEST} is not a file an rlnb demo wrote; move it away or pick another --out"


def test_a_manifest_nested_past_the_json_decoder_is_read_as_no_manifest(tmp_path):
    """Damage as any other (its files are then no demo's): it was a ``RecursionError`` traceback, exit 1."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.csv").write_text("step\n")
    (out / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"holds files no earlier rlnb demo wrote there \(history\.csv\)"):
        check_out(out, force=False)
    check_out(out, force=True)  # --force replaces them, as with any manifest that names none of them


def test_a_full_disk_before_the_demo_trains_says_so_and_leaves_no_manifest_half_written(tmp_path, monkeypatch):
    """Seen on a full tmpfs: "cannot set the earlier demo's files ... aside" where there were none, and an empty
    ``.rlnb-demo.json.tmp`` left (the write failed at its close, past ``write_new``'s clean-up)."""
    out = tmp_path / "out"
    out.mkdir()

    def full(file, data, *args, **kwargs):
        file.write_bytes(b"")  # made, then its bytes found no room
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(demo_files, "write_new", full)
    with pytest.raises(ValueError) as refused:
        set_aside_earlier_output(out, force=False)
    assert str(refused.value) == f"cannot write the demo's files in {out}: [Errno 28] No space left on device"
    assert list(out.iterdir()) == []


def test_an_out_whose_name_is_past_the_file_systems_limit_is_refused_naming_it(tmp_path):
    """``[Errno 36] File name too long`` came out as an ``OSError``: one line, but exit 1 and no word of ``--out``."""
    out = tmp_path / ("a" * 300)
    with pytest.raises(
        ValueError, match=r"^cannot write the demo's files in .*a{300}: \[Errno 36\] File name too long"
    ):
        check_out(out, force=False)
