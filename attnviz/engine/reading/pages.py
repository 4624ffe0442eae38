"""Pages of memory: faulting a buffer's pages in ahead of its first writes, and giving pages back
(Linux madvise(2); elsewhere each call says it could not)."""

from __future__ import annotations

import numpy as np

MADV_DONTNEED = 4  # Linux: let go of a range's pages (anonymous memory reads as zeros after)
MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault a range's pages in, writable, without writing
POPULATE_BYTES = 16 << 20  # faulted in a call (eight huge pages)
PAGE = 4096


def populate_pages(a: np.ndarray) -> bool:
    """Fault in the pages of array `a` (C-contiguous) now, writable, leaving its contents as they
    are; False where the system cannot (not Linux, a kernel before 5.14): its first writes then
    fault them in, as without this. A fresh buffer's first touch costs a page fault a page (a huge
    page a fault where they are given); a virtual machine whose host takes back its free memory
    makes each of those a fault in the host too. Done on a thread of its own while the GIL is held
    elsewhere (ctypes lets go of it), that cost is paid beside other work. In pieces of
    POPULATE_BYTES: the kernel holds the process's memory map for the length of one call, which
    would stall another thread's allocations for the whole buffer's."""
    if a.nbytes == 0 or not a.flags.c_contiguous:
        return False
    lo = a.ctypes.data - a.ctypes.data % PAGE
    return madvise(a, MADV_POPULATE_WRITE, lo, a.ctypes.data + a.nbytes, POPULATE_BYTES)



def madvise(a: np.ndarray, advice: int, lo: int | None = None, hi: int | None = None,
            piece: int | None = None) -> bool:
    """madvise(2) on the bytes lo..hi (default: the whole pages within array `a`), `piece` bytes a
    call; False where the system has no such call or refuses it."""
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).madvise
        call.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    except (OSError, AttributeError):
        return False
    if lo is None:
        lo = -(-a.ctypes.data // PAGE) * PAGE
    if hi is None:
        hi = (a.ctypes.data + a.nbytes) // PAGE * PAGE
    for at in range(lo, hi, piece or max(1, hi - lo)):
        if call(ctypes.c_void_p(at), ctypes.c_size_t(min(piece or hi - lo, hi - at)), advice) != 0:
            return False
    return True
