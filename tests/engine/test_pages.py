"""Small pages for a one-shot command (engine/reading/pages.py): the host's free page reporting is
read from the virtio balloon's features, and once small pages are asked for, NumPy's large arrays
and the load's arena are advised against huge pages (their mapping's VmFlags say `nh`), with the
same values in them."""

import platform
import sys

import numpy as np
import pytest

from attnviz.engine.reading import pages
from attnviz.engine.reading.budget import _Arena


def virtio(root, name, device, features):
    dev = root / "bus" / "virtio" / "devices" / name
    dev.mkdir(parents=True)
    (dev / "device").write_text(device + "\n")
    (dev / "features").write_text(features + "\n")


@pytest.mark.parametrize("devices, reclaims", [
    ([("virtio0", "0x0001", "1" * 64)], False),  # a network card, every bit set: not a balloon
    ([("virtio0", "0x0005", "1111100000")], False),  # a balloon without free page reporting
    ([("virtio0", "0x0001", "0" * 64), ("virtio1", "0x0005", "0000010000")], True),
    ([("virtio0", "0x0005", "00001")], False),  # a features string too short to hold the bit
    ([], False),  # not a virtual machine (no virtio devices)
])
def test_free_page_reporting_is_read_from_the_balloons_features(tmp_path, devices, reclaims):
    for name, device, features in devices:
        virtio(tmp_path, name, device, features)
    assert pages.host_reclaims_free_memory(str(tmp_path)) is reclaims
    assert pages.small_pages_where_host_reclaims(str(tmp_path / "none")) is False
    assert pages.huge_pages()  # nothing asked for small pages


def vm_flags(a: np.ndarray) -> list[str]:
    """The VmFlags of the mapping that holds array `a`'s middle byte (/proc/self/smaps: NumPy
    advises from the array's first whole page on, a mapping of its own)."""
    at, inside = a.ctypes.data + a.nbytes // 2, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= at < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError("no mapping holds the array")


FRESH = 48 << 20  # bytes: above glibc's largest mmap threshold, a mapping of its own (not reused)


SMALL = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from test_pages import FRESH, vm_flags
from attnviz.engine.reading import pages
from attnviz.engine.reading.budget import _Arena
if not pages.use_huge_pages(False):
    print("cannot")
    raise SystemExit
assert not pages.huge_pages()
arena = _Arena(64 << 20)
slot = arena._take((1024, 1024))
assert "nh" in vm_flags(slot)  # the arena's buffer, advised before its first touch
a = np.empty(FRESH, np.uint8)
assert "hg" not in vm_flags(a)  # NumPy gave it no huge-page advice
slot[:] = np.arange(slot.size, dtype=np.float32).reshape(slot.shape)
assert np.array_equal(slot.ravel(), np.arange(slot.size, dtype=np.float32))
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and smaps are Linux's")
def test_small_pages_advise_numpy_arrays_and_the_arena_against_huge_pages():
    """In a process of its own: a test process's heap, grown and advised by the tests before,
    could hand out the large array from memory NumPy advised earlier."""
    import subprocess
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", SMALL, str(Path(__file__).parent)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "cannot":
        pytest.skip("this NumPy cannot be told whether to advise huge pages")
    assert out.stdout.strip() == "ok"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and smaps are Linux's")
def test_huge_pages_come_back_when_asked_for():
    assert pages.use_huge_pages(False) and pages.use_huge_pages(True)
    assert pages.huge_pages()
    a = np.empty(FRESH, np.uint8)
    assert "hg" in vm_flags(a)  # NumPy's own advice, from 4 MiB on
    assert "nh" not in vm_flags(_Arena(64 << 20)._take((1024, 1024)))


HEAP = """
import os
import sys
import numpy as np
from attnviz.engine.reading import pages
ok = pages.reuse_freed_memory() if sys.argv[1] == "reuse" else None
a = np.ones(16 << 18, np.float32)  # 16 MiB (glibc's own threshold: 128 KiB, or a larger one freed)
at = a.ctypes.data
for line in open("/proc/self/maps"):
    span, *rest = line.split()
    lo, hi = (int(x, 16) for x in span.split("-"))
    if lo <= at < hi:
        print(ok, rest[4] if len(rest) > 4 else "a mapping of its own")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc's malloc on Linux")
def test_a_one_shot_process_makes_large_arrays_from_its_heap():
    """reuse_freed_memory: a 16 MiB array lies in the process's heap (where a freed one's pages
    are used again), not in a mapping of its own, as it does without."""
    import subprocess

    def where(mode):
        return subprocess.run([sys.executable, "-c", HEAP, mode], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert where("reuse") == "True [heap]"
    assert where("plain") == "None a mapping of its own"
