"""Secrets never leave rlnb: ``redaction`` (the keys and credentials rlnb knows, hidden where it receives them,
masked in every text it shows, raises or logs: ``RedactingFilter``, ``configure_logging``), ``masks`` (the forms of
a key as a text may quote it, and one pattern of them all) and ``presigned`` (a presigned URL's query, its signature,
masked in the HTTP log lines made while one is sent).

Nothing here imports the rest of rlnb: the remote client, the server's settings, sinks and sweeps call it from above.
"""
