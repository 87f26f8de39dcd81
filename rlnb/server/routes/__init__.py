"""One router per resource of ``/v1/rl``: model resources, sessions, operations, checkpoints, payloads."""
