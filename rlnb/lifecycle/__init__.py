"""The process's and its threads' lifecycle: ``shutdown`` (one ordered interpreter-exit hook, which a SIGTERM or a
Ctrl-C hurries), ``threads`` (rlnb's own threads, whose end a Ctrl-C in a ``join`` cannot hide) and ``ctrl_c`` (a
Ctrl-C held over lines that must finish together, then raised).

Nothing here imports the rest of rlnb: each piece that waits or exits (a session's worker, a sink's thread, the remote
sender and poller, a panel) adds its step or its thread from above.
"""
