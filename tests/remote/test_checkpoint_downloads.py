"""``APIClient.download_checkpoint`` against hostile answers (httpx.MockTransport): names that lead out of the
folder, files of the wrong size, URLs to another host or down to http, a file that fails or never ends. Nothing is
written outside the folder, no partial file is left, the key never goes to a file's URL."""

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import rlnb
from rlnb.remote.client import APIClient
from tests.support.checkpoint_storage import CID, Storage, client
from tests.support.fake_api import BASE, KEY, quick


def everything(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_files_arrive_whole_from_another_host_without_the_key(tmp_path):
    storage = Storage({"config.json": b"{}", "weights/model.safetensors": b"x" * 3000})
    with client(storage) as c:
        paths = c.download_checkpoint(CID, tmp_path / "out", variant="CHECKPOINT_VARIANT_ADAPTER")
    out = (tmp_path / "out").resolve()
    assert paths == [out / "config.json", out / "weights" / "model.safetensors"]
    assert [p.read_bytes() for p in paths] == [b"{}", b"x" * 3000]
    assert everything(tmp_path / "out") == ["config.json", "weights", "weights/model.safetensors"]
    api, *files = storage.seen
    assert api.headers["Authorization"] == f"Bearer {KEY}" and api.url.params["variant"] == "CHECKPOINT_VARIANT_ADAPTER"
    assert len(files) == 2 and all("Authorization" not in r.headers and r.url.host == "storage.test" for r in files)


@pytest.mark.parametrize(
    "name",
    ["../escape", "/tmp/absolute", "a/../../escape", "..", ".", "", "a//b", "sub/./x", "a\\..\\x", "C:x", "bad\nname"],
)
def test_a_name_that_could_lead_out_of_the_folder_is_refused_before_anything_is_fetched(tmp_path, name):
    storage = Storage({"ok.json": b"{}", name: b"evil"})
    folder = tmp_path / "box" / "out"
    with client(storage) as c, pytest.raises(rlnb.APIError, match="nothing was written") as info:
        c.download_checkpoint(CID, folder)
    assert repr(name) in str(info.value)
    assert storage.file_gets() == [] and everything(tmp_path) in ([], ["box"], ["box", "box/out"])


def test_a_symlinked_sub_folder_cannot_lead_out(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sub").symlink_to(outside)
    storage = Storage({"sub/deeper/x.bin": b"evil"})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="symlinked folder"):
        c.download_checkpoint(CID, tmp_path / "out")
    assert storage.file_gets() == [] and list(outside.iterdir()) == []


def test_a_name_listed_twice_and_a_negative_size_and_no_files_are_refused(tmp_path):
    for files, sizes, said in [
        ([("w/a", b"1"), ("w/a", b"2")], {}, "'w/a', which is listed twice"),
        ({"a": b"1"}, {"a": -1}, "negative size"),
        ({}, {}, "lists no files"),
    ]:
        storage = Storage(files, sizes=sizes)
        with client(storage) as c, pytest.raises(rlnb.APIError, match=said):
            c.download_checkpoint(CID, tmp_path / "out")
        assert storage.file_gets() == []


@pytest.mark.parametrize(
    ("sent", "listed", "said"),
    [
        (b"0123456789", 5, "is 10 bytes long by its Content-Length, but the API listed it as 5"),
        (b"012", 5, "is 3 bytes long by its Content-Length, but the API listed it as 5"),
        (iter([b"01234", b"56789"]), 5, "sent more than the 5 bytes the API listed for it"),
        (iter([b"01", b"2"]), 5, "ended after 3 of the 5 bytes"),
    ],
)
def test_a_file_of_another_size_than_listed_fails_and_leaves_nothing(tmp_path, sent, listed, said):
    storage = Storage({"ok.bin": b"fine", "model.bin": b"?"}, sizes={"model.bin": listed})
    storage.answers["model.bin"] = lambda request: httpx.Response(200, content=sent)
    (tmp_path / "ok.bin").write_bytes(b"an older download")
    with client(storage) as c, pytest.raises(rlnb.APIError, match=said) as info:
        c.download_checkpoint(CID, tmp_path)
    assert "secret-signature" not in str(info.value)  # the URL's signature is not shown
    assert everything(tmp_path) == ["ok.bin"] and (tmp_path / "ok.bin").read_bytes() == b"an older download"


def test_a_file_that_keeps_failing_leaves_no_file_of_the_checkpoint(tmp_path):
    storage = Storage({"a.bin": b"aaaa", "b.bin": b"bbbb"})
    storage.answers["b.bin"] = httpx.Response(404, json={"error": {"message": "gone", "type": "not_found"}})
    with client(storage, max_retries=1) as c, pytest.raises(rlnb.NotFoundError, match="gone"):
        c.download_checkpoint(CID, tmp_path / "out")
    assert everything(tmp_path / "out") == []
    assert [r.url.path for r in storage.file_gets()].count(storage.file_gets()[-1].url.path) == 1  # a 404: no retry


def test_a_failed_download_leaves_none_of_the_sub_folders_it_made(tmp_path):
    """``sub/deep`` stayed behind, empty, after a failed download; a folder that was there stays, with its files."""
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_bytes(b"mine")
    storage = Storage({"a.bin": b"aaaa", "sub/deep/x.bin": b"xxxx", "kept/y.bin": b"yyyy", "kept/new/z.bin": b"zz"})
    storage.answers["sub/deep/x.bin"] = httpx.Response(403, json={"error": {"message": "expired", "type": "denied"}})
    with client(storage, max_retries=0) as c, pytest.raises(rlnb.APIStatusError, match="expired"):
        c.download_checkpoint(CID, tmp_path)
    assert everything(tmp_path) == ["kept", "kept/mine.txt"]


def test_a_file_get_is_retried_from_its_first_byte(tmp_path):
    storage = Storage({"a.bin": b"abcdef"})
    answers = [httpx.Response(503), None]

    def flaky(request: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if answer is None:
            return httpx.Response(200, content=b"abcdef")
        return answer

    storage.answers["a.bin"] = flaky
    with client(storage) as c:
        [path] = c.download_checkpoint(CID, tmp_path)
    assert path.read_bytes() == b"abcdef" and len(storage.file_gets()) == 2 and everything(tmp_path) == ["a.bin"]


def test_a_file_that_never_ends_stops_at_the_deadline_and_leaves_nothing(tmp_path):
    dripped = []

    def drip() -> Iterator[bytes]:
        for _ in range(1000):  # 50 s of drip: the deadline ends it long before
            time.sleep(0.05)
            dripped.append(1)
            yield b"x"

    storage = Storage({"a.bin": b"?"}, sizes={"a.bin": 1 << 30})
    storage.answers["a.bin"] = lambda request: httpx.Response(200, content=drip())
    with client(storage) as c, pytest.raises(rlnb.APITimeoutError, match="download's deadline"):
        c.download_checkpoint(CID, tmp_path, deadline=0.1)
    assert everything(tmp_path) == [] and len(dripped) < 200  # not read to its end (it was, buffered into 1 MiB chunks)


def test_presigned_urls_are_checked_as_the_payloads_are(tmp_path):
    for base, url, said in [
        ("https://api.test", "http://storage.test/f?sig=s", "is http:// under an https base_url"),
        (BASE, "/v1/rl/relative?sig=s", "is not an absolute http"),
    ]:
        storage = Storage({"a.bin": b"a"}, urls={"a.bin": url})
        with client(storage, base=base) as c, pytest.raises(rlnb.APIError, match=said):
            c.download_checkpoint(CID, tmp_path)
        assert storage.file_gets() == [] and everything(tmp_path) == []


def test_more_than_the_disk_holds_is_refused_before_a_byte_is_fetched(tmp_path):
    """Nor a folder made: the refusal came after the listing's sub-folders were, and left them behind empty."""
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    storage = Storage({"sub/deeper/a.bin": b"a"}, sizes={"sub/deeper/a.bin": free + (1 << 40)})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="free: nothing was written"):
        c.download_checkpoint(CID, tmp_path)
    assert storage.file_gets() == [] and everything(tmp_path) == []


def test_bad_arguments_are_refused_before_anything_is_sent(tmp_path):
    storage = Storage({"a.bin": b"a"})
    (tmp_path / "a-file").write_text("x")
    with client(storage) as c:
        for call, said in [
            (lambda: c.download_checkpoint(CID, tmp_path / "a-file"), "is a file, not a folder"),
            (lambda: c.download_checkpoint(CID, tmp_path, variant="MERGED"), "variant must be one of"),
            (lambda: c.download_checkpoint(CID, tmp_path, deadline=0), "deadline must be a finite number"),
            (lambda: c.download_checkpoint(CID, ""), "folder must be a non-empty path"),
            (lambda: c.download_checkpoint("", tmp_path), "non-empty checkpoint_id"),
            (lambda: c.checkpoint_download_urls(CID, "ADAPTER"), "variant must be one of"),
        ]:
            with pytest.raises(ValueError, match=said):
                call()
    assert storage.seen == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts this process's descriptors in /proc")
def test_a_checkpoint_of_many_files_holds_one_file_open_at_a_time(tmp_path):
    """Every partial file was opened before the first GET: a server listing 10,000 files ran out of descriptors."""
    storage = Storage({f"shard-{i:03}.bin": bytes([i % 256]) for i in range(60)})
    held, before = [], len(os.listdir("/proc/self/fd"))

    def counting(request: httpx.Request) -> httpx.Response:
        held.append(len(os.listdir("/proc/self/fd")))
        return storage(request)

    with APIClient(BASE, KEY, transport=httpx.MockTransport(counting), **quick({})) as c:
        paths = c.download_checkpoint(CID, tmp_path)
    assert len(paths) == 60 and paths[7].read_bytes() == b"\x07" and max(held) < before + 30


@pytest.mark.parametrize("listed", [["sub/x", "sub"], ["sub", "sub/x"], ["a/b/c", "a/b"]])
def test_a_name_that_is_another_names_folder_is_refused_before_anything_is_fetched(tmp_path, listed):
    """``sub/x`` and ``sub``: ``sub/x`` was renamed into place, then ``sub`` (a folder by then) raised a bare
    ``IsADirectoryError``: half a checkpoint written, against the all or nothing promise."""
    storage = Storage({name: b"1" for name in listed})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="nothing was written") as info:
        c.download_checkpoint(CID, tmp_path / "out")
    assert "is also the folder of" in str(info.value)
    assert storage.file_gets() == [] and not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


@pytest.mark.parametrize(("there", "listed"), [("sub", "sub"), ("sub/x", "sub/x/y")])
def test_a_name_that_a_folder_or_file_in_the_folder_is_in_the_way_of_is_refused(tmp_path, there, listed):
    """A folder where a file goes (``sub``), or a file where a folder goes (``sub/x`` for ``sub/x/y``): the rename
    (or mkdir) failed with a bare OSError once the other files were fetched, or renamed."""
    out = tmp_path / "out"
    (out / there).parent.mkdir(parents=True)
    (out / there).mkdir() if there == listed else (out / there).write_bytes(b"mine")
    storage = Storage({"a.json": b"{}", listed: b"1"})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="nothing was written") as info:
        c.download_checkpoint(CID, out)
    assert repr(there) in str(info.value) and storage.file_gets() == [] and not (out / "a.json").exists()


@pytest.mark.parametrize("name", ["a" * 300, "d" * 300 + "/x", "p" * 250])
def test_a_name_longer_than_the_file_system_takes_is_refused_naming_it(tmp_path, name):
    """A bare ``OSError: File name too long`` (``p * 250`` fits, its partial file does not), naming no checkpoint."""
    storage = Storage({"ok.json": b"{}", name: b"1"})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="nothing was written") as info:
        c.download_checkpoint(CID, tmp_path / "out")
    assert "longer than" in str(info.value) and storage.file_gets() == []


@pytest.mark.parametrize(
    ("listed", "first", "second"),
    [
        (["Model.pt", "model.pt"], "Model.pt", "model.pt"),
        (["w/A.bin", "W/a.bin"], "w/A.bin", "W/a.bin"),
        (["caf\u00e9.json", "cafe\u0301.json"], "caf\u00e9.json", "cafe\u0301.json"),  # one name on macOS
        (["Sub", "sub/x"], "Sub", "sub/x"),  # a file and a folder of one name there
    ],
)
def test_two_names_one_file_on_a_case_insensitive_file_system_are_refused_naming_both(tmp_path, listed, first, second):
    """``Model.pt`` and ``model.pt`` are two files here, one on macOS's or Windows' file system (case- and
    normalization-insensitive): the second was written over the first, and the folder held half the checkpoint."""
    storage = Storage({name: b"1" for name in listed})
    with client(storage) as c, pytest.raises(rlnb.APIError, match="nothing was written") as info:
        c.download_checkpoint(CID, tmp_path / "out")
    said = str(info.value)
    assert repr(first) in said and repr(second) in said and "differ only in case" in said
    assert storage.file_gets() == [] and not (tmp_path / "out").exists()


def test_two_files_in_folders_spelt_in_two_cases_both_arrive(tmp_path):
    """Guard: ``Sub/x`` and ``sub/y`` are two files in any file system (one folder on macOS's): not refused."""
    storage = Storage({"Sub/x": b"1", "sub/y": b"2"})
    with client(storage) as c:
        paths = c.download_checkpoint(CID, tmp_path / "out")
    assert [p.read_bytes() for p in paths] == [b"1", b"2"]
