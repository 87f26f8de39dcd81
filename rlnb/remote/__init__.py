"""The remote backend: a session of Together's RL API (or of ``rlnb serve``) over httpx.

``RemoteBackend`` (``backend``) submits, once ``start`` has created or attached to the session (what a
new one is: ``SessionOptions``); ``APIClient`` (``client``, on the send path of ``calls``) calls the API, with
retries (``retry``), deadlines (``transport``) and the payload side channel (``payloads``); ``Poller`` (``poller``)
follows operations to their end, as ``PollOptions`` (``waiting``) say.
"""
