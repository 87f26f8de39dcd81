"""Stand-ins for a reader or a copy that finds no memory, whatever they are called with: torch's CPU allocator's own
error (a plain ``RuntimeError``, as a real one read on resume under ``RLIMIT_AS``) and Python's ``MemoryError``."""

from typing import NoReturn

ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
    "allocate 33554432 bytes. Error code 12 (Cannot allocate memory)"
)
NO_MEMORY = "Unable to allocate 20.0 GiB"


def no_room(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError(ALLOCATOR)


def no_memory(*args: object, **kwargs: object) -> NoReturn:
    raise MemoryError(NO_MEMORY)
