"""The packages a load thread (numba) and the main thread (pyqtgraph) both import, and
that import a submodule of their own, are imported with the window's load machinery, on the thread
that imports it, before any load thread starts (ui/machinery/loading.py: CPython's module locks
deadlock on a package and its submodule imported by two threads at once)."""

import subprocess
import sys


def test_the_shared_packages_are_imported_with_the_load_machinery():
    code = ("import sys; import attnviz.ui.machinery.loading; "
            "print(all(m in sys.modules for m in ('colorama', 'html.entities')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
