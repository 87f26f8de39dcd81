"""A session's metadata is at most ``max_label_bytes`` of JSON, but a PATCH was checked alone: six PATCHes of one W&B
field each (60 KB, under the 64 KB limit) left a 360 KB metadata behind, served in every GET and list. Now the
metadata a PATCH would leave is checked, and a PATCH past the limit changes nothing."""

from tests.support.server import app_client, new_session


def test_patches_cannot_grow_metadata_past_the_limit(tmp_path):
    with app_client(tmp_path) as c:
        _, sid = new_session(c)
        big = "x" * 40_000
        assert c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"url": big}}}).status_code == 200
        r = c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"project": big}}})
        assert r.status_code == 400, r.text[:300]
        err = r.json()["error"]
        assert err["param"] == "metadata" and "(max_label_bytes)" in err["message"], err
        kept = c.get(f"/training-sessions/{sid}").json()["metadata"]["wandb"]
        assert kept["url"] == big and kept["project"] is None  # the refused PATCH changed nothing
        cleared = c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"url": ""}}})
        assert cleared.status_code == 200  # a PATCH that shrinks it is taken
        assert c.patch(f"/training-sessions/{sid}", json={"metadata": {"wandb": {"project": big}}}).status_code == 200
