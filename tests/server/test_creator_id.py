"""``created_by`` under ``rlnb serve --token``: it was ``user-`` and the first 12 hex digits of the token's plain
SHA-256, in every session and resource answered and in the state journal (which other users of the machine may read): an
offline check of guessed tokens (an 8-character token of lowercase letters falls to a GPU in minutes). It is now keyed
with the server's signing key, so it says nothing about the token, and stays the same across restarts."""

import hashlib

from tests.support.server import app_client

TOKEN = "t-secret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_created_by_says_nothing_about_the_token_and_survives_a_restart(tmp_path):
    state_dir = tmp_path / "state"
    with app_client(tmp_path / "ckpt", state_dir=state_dir, token=TOKEN) as c:
        made = c.post("/model-resources", json={"base_model": "rlnb/tiny"}, headers=AUTH).json()
    who = made["created_by"]
    for digest in (hashlib.sha256, hashlib.sha1, hashlib.md5, hashlib.blake2b):
        assert digest(TOKEN.encode()).hexdigest()[:8] not in who
    assert TOKEN not in (state_dir / "registry.jsonl").read_text()
    with app_client(tmp_path / "ckpt", state_dir=state_dir, token=TOKEN) as c:  # the same key: the same creator
        mine = c.get("/model-resources", params={"created_by": "me"}, headers=AUTH).json()["data"]
        assert [r["id"] for r in mine] == [made["id"]] and mine[0]["created_by"] == who
