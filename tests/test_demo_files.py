"""``rlnb demo``'s earlier output, set aside in ``EARLIER`` while a new run trains: a stop while it is being set
aside leaves it as it was."""

import pytest

from rlnb.cli import demo_files
from rlnb.cli.demo_files import EARLIER, MANIFEST, note_own_files, set_aside_earlier_output
from rlnb.history.store import RunStore


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
    with pytest.raises(ValueError, match="cannot set the earlier demo's files in .* aside: .* is a symbolic link"):
        set_aside_earlier_output(out, force=False)
    assert (tmp_path / "precious").read_text() == "the user's" and not (out / MANIFEST).exists()
