"""A tracking URI's password kept out of a sink's warning or ``SinkError`` however the URL spells its user
(hostile7): Python's ``urlsplit``, and the libraries, read the password up to the authority's last ``@``."""

from urllib.parse import urlsplit

import pytest

from rlnb.sinks.scrubbing import scrub, scrubbed


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://bob@corp.com:hunter2@mlflow:5000/api", "http://bob@corp.com:***@mlflow:5000/api"),  # e-mail as user
        ("http://bob:p@ss@mlflow:5000", "http://bob:***@mlflow:5000"),  # an @ in the password
        ("postgresql+psycopg2://u:pw@db/mlflow", "postgresql+psycopg2://u:***@db/mlflow"),
        ("http://mlflow:5000/x@y", "http://mlflow:5000/x@y"),  # no user: nothing to hide
    ],
)
def test_a_urls_password_is_hidden_however_its_user_is_spelt(url, shown):
    """``http://bob@corp.com:hunter2@host`` (MLflow's basic auth with an e-mail address) was shown whole in the
    warning that drops the sink; ``p@ss`` as ``***@ss@host``."""
    password = urlsplit(url).password
    error = ConnectionError(f"HTTPConnectionPool: Max retries exceeded with url: {url} (Caused by refused)")
    said = str(scrubbed(error))
    assert scrub(url) == shown
    assert shown in said and (password is None or password not in said.replace(shown, "")), said
