"""glibc's heap, kept from growing under allocations of ever-changing sizes (batches of varying shapes).

glibc raises its mmap threshold as large blocks are freed, so later blocks of those sizes come from the heap,
which then fragments and keeps its pages: a process's resident size grows with the batches it has run.
Elsewhere (another C library) both helpers do nothing.
"""

import ctypes

M_MMAP_THRESHOLD = -3


def libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def bound_heap_growth(threshold: int = 1 << 20):
    """Serve allocations over `threshold` bytes with mmap from now on, so that freeing them returns the memory
    (training: measured +100 MB per 50 steps of a tiny model without it)."""
    mallopt = getattr(libc(), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, threshold)


def heap_trimmer():
    """A function that hands the heap's free pages back to the system (glibc's malloc_trim), or None."""
    return getattr(libc(), "malloc_trim", None)


def trim_heap() -> None:
    """Hand the heap's free pages back now (after a unit of work whose buffers are gone: an embedded shard)."""
    trim = heap_trimmer()
    if trim is not None:
        trim(0)
