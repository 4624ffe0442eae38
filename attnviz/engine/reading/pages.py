"""Pages of memory: faulting a buffer's pages in ahead of its first writes, giving pages back
(Linux madvise(2); elsewhere each call says it could not), whether large arrays ask for huge
pages (small_pages_where_host_reclaims: a one-shot command on a virtual machine whose host takes
back the memory its guest frees), a one-shot process's freed arrays kept for its next ones
(reuse_freed_memory), and which array owns the memory an array lies in (owner)."""

from __future__ import annotations

import functools
import glob
import mmap
import os
import sys

import numpy as np

MADV_DONTNEED = 4  # Linux: let go of a range's pages (anonymous memory reads as zeros after)
MADV_NOHUGEPAGE = 15  # Linux: no transparent huge pages in a range
MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault a range's pages in, writable, without writing
POPULATE_BYTES = 16 << 20  # faulted in a call (eight huge pages)
PAGE = 4096


def owner(a) -> np.ndarray | None:
    """The array whose memory array `a` lies in: itself, or the array it views, through every
    level of bases; None where that memory is a memory-mapped file's (its pages, which the system
    reads in and lets go, are no array's)."""
    while isinstance(a, np.ndarray):  # (np.memmap's astype gives a memmap owning its memory: the bases tell)
        if not isinstance(a.base, np.ndarray):
            return None if isinstance(a.base, mmap.mmap) else a
        a = a.base
    return None


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



@functools.cache
def _madvise_call():
    """The C library's madvise, looked up once (each lookup makes objects: a lowered budget calls
    madvise a layer at a time, its copies in memory meanwhile); None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        call = ctypes.CDLL(None, use_errno=True).madvise
        call.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    except (OSError, AttributeError):
        return None
    return call


def madvise(a: np.ndarray, advice: int, lo: int | None = None, hi: int | None = None,
            piece: int | None = None) -> bool:
    """madvise(2) on the bytes lo..hi (default: the whole pages within array `a`), `piece` bytes a
    call; False where the system has no such call or refuses it."""
    call = _madvise_call()
    if call is None:
        return False
    import ctypes

    if lo is None:
        lo = -(-a.ctypes.data // PAGE) * PAGE
    if hi is None:
        hi = (a.ctypes.data + a.nbytes) // PAGE * PAGE
    for at in range(lo, hi, piece or max(1, hi - lo)):
        if call(ctypes.c_void_p(at), ctypes.c_size_t(min(piece or hi - lo, hi - at)), advice) != 0:
            return False
    return True


VIRTIO_BALLOON = "0x0005"  # /sys/bus/virtio/devices/*/device of a memory balloon
FREE_PAGE_REPORTING = 5  # VIRTIO_BALLOON_F_REPORTING: the bit of its features file


def host_reclaims_free_memory(sys_root: str = "/sys") -> bool:
    """Whether this is a virtual machine whose balloon reports free pages to the host (free page
    reporting), which takes their memory back: the next first touch of such memory faults in the
    host too. The kernel reports free blocks of 2 MiB and more, exactly what a huge page's first
    touch takes, while 4 KiB pages come mostly from smaller free blocks the host still backs."""
    for dev in sorted(glob.glob(os.path.join(sys_root, "bus/virtio/devices/*"))):
        try:
            with open(os.path.join(dev, "device")) as fh:
                if fh.read().strip() != VIRTIO_BALLOON:
                    continue
            with open(os.path.join(dev, "features")) as fh:
                bits = fh.read().strip()
        except OSError:
            continue
        if len(bits) > FREE_PAGE_REPORTING and bits[FREE_PAGE_REPORTING] == "1":
            return True
    return False


_huge = True  # huge_pages()


def huge_pages() -> bool:
    """Whether large arrays made from now on ask for transparent huge pages (NumPy's default from
    4 MiB on, and the load's arenas, engine/reading/budget.py)."""
    return _huge


def use_huge_pages(on: bool) -> bool:
    """Make large arrays from now on ask for huge pages (`on`) or not: NumPy's advice on its own
    arrays and the arenas'. Contents and results are the same either way. False where NumPy cannot
    be told (its advice then stays as it is)."""
    global _huge
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return False
    _set_madvise_hugepage(bool(on))
    _huge = bool(on)
    return True


def small_pages_where_host_reclaims(sys_root: str = "/sys") -> bool:
    """For a one-shot command's process: where the host takes back free memory
    (host_reclaims_free_memory), large arrays get 4 KiB pages. There each huge page's first touch
    waits on the host for its 2 MiB, which costs a command that fills its layers once several times
    what it saves in address translation; a long-lived process (the window) keeps huge pages, whose
    cost it pays once. True where small pages were asked for."""
    return host_reclaims_free_memory(sys_root) and use_huge_pages(False)


def no_huge_pages(a: np.ndarray) -> bool:
    """Advise the whole pages of array `a` against huge pages (where huge_pages() is off and the
    system has transparent huge pages for every mapping, NumPy's own advice is not enough)."""
    return madvise(a, MADV_NOHUGEPAGE)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt(3) parameters
HEAP_ARRAYS = 32 << 20  # bytes: glibc's largest mmap threshold
KEEP_FREED = 1 << 30  # bytes free at the heap's top before glibc gives them back


def reuse_freed_memory() -> bool:
    """For a one-shot command's process: arrays of up to HEAP_ARRAYS bytes come from the heap, and
    what is freed stays with the process for its next arrays (glibc's malloc: M_MMAP_THRESHOLD,
    M_TRIM_THRESHOLD). Otherwise each array above glibc's threshold (128 KiB until a larger one is
    freed) is a fresh mapping, every page of it a fault again: the arrays a run makes and frees
    layer after layer. The peak memory stays what it was; the process ends soon after. False where
    the C library has no such setting (not glibc) or refuses it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 (glibc's own: musl's mallopt does nothing)
        mallopt = libc.mallopt
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    except (OSError, AttributeError):
        return False
    return mallopt(M_MMAP_THRESHOLD, HEAP_ARRAYS) == 1 and mallopt(M_TRIM_THRESHOLD, KEEP_FREED) == 1
