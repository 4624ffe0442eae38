"""Regression for the PySide6 pin: 6.12.0 aborts on Python 3.11 ("Fatal Python error: none_dealloc")
after a few thousand Qt calls that return None. Runs in a subprocess so an abort fails this test only."""

import subprocess
import sys


def test_many_none_returning_qt_calls_do_not_abort():
    code = ("from PySide6.QtCore import QObject\n"
            "o = QObject()\n"
            "for _ in range(10000):\n"
            "    o.setObjectName('x')\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
