"""Whether a process has ended, for tests of children that must not outlive their parent."""

import time


def gone(pid: int, within: float = 60.0) -> bool:
    """Whether process ``pid`` has ended (it may be a zombie of ours until reaped), polling until ``within`` s."""
    deadline = time.monotonic() + within
    while True:  # looked at once at least (within=0)
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
