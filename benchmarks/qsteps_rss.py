"""qsteps' memory figures: VmRSS of a fresh process after loading SmolLM2 and typing a sentence key by
key (one run a key, as the window's engine does), with the kernels and without them (packing off:
every layer float32). Goal: <= 350 MB (the window's RSS after typing; the engine's alone is
measured here, the window adds Qt's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.record import figure


def _rss_child(kernels: bool) -> dict:
    """VmRSS / VmHWM (MiB) of a fresh process: SmolLM2 loaded, a sentence typed key by key."""
    code = f"""
import json
kernels = {kernels}
from attnviz.engine.reading import qpack
qpack.ask_for_kernels(kernels)  # off: no packed copies, the float32 path alone
from attnviz.engine.computing.load import load_model
m = load_model("SmolLM2-135M-Instruct")
text = "The quick brown fox jumps over the lazy dog, then naps."
for i in range(1, len(text) + 1):
    m.run(text[:i])
st = dict(l.split(":", 1) for l in open("/proc/self/status") if l.startswith(("VmRSS", "VmHWM")))
print(json.dumps({{k: int(v.split()[0]) / 1024 for k, v in st.items()}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])



def rss_figures() -> list[dict]:
    """The resident set after typing in a fresh process, with the kernels and float32 only."""
    if not os.path.exists("/proc/self/status"):
        return []
    on, off = _rss_child(True), _rss_child(False)
    load = os.getloadavg()[0]
    figs = [figure("RSS after typing, kernels (packed blocks, no float32 copies)", on["VmRSS"], "MiB",
                   goal=350 / 1.048576, headline=True,
                   note=f"fresh process, engine only; peak {on['VmHWM']:.0f} MiB; load average "
                        f"{load:.1f}"),
            figure("RSS after typing, float32 only", off["VmRSS"], "MiB",
                   note=f"the same without packing or numba; peak {off['VmHWM']:.0f} MiB")]
    print(f"RSS after typing: kernels {on['VmRSS']:.0f} MiB, float32 only {off['VmRSS']:.0f} MiB")
    return figs
