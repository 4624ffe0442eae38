"""Argument checks shared by the commands: numbers in range, output paths that can be written.

Each check fails before any model is loaded, with one line that names the flag and the value."""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from pathlib import Path

from attnviz.engine.errors import InputError
from attnviz.engine.computing.text_input import parse_typed_ids
from attnviz.engine.reading.registry import WINDOW_MODEL
from attnviz.engine.reading.token_text import cut_shown, tokens



def at_least(minimum: int):
    """An argparse `type`: an integer >= minimum (usage error otherwise)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value
    return parse


positive = at_least(1)
non_negative = at_least(0)


def fraction(text: str) -> float:
    """An argparse `type`: a number in (0, 1], such as a strength a head must reach (usage error
    otherwise, nan and inf included: a threshold that no number, or every one, passes)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value <= 1:  # (false for nan as well)
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text}")
    return value


def parse_ids(text: str, flag: str = "--ids") -> list[int]:
    """`"5, 17,3"` -> [5, 17, 3]: each item read as the engine reads typed token ids
    (text_input.parse_typed_ids), in the command line's stricter form: comma-separated, no empty
    item. A refusal names the item and its position."""
    example = f"give comma-separated token ids, e.g. {flag} 5,17,3"
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise InputError(f"{flag} {text!r} holds no token ids: {example}")
    ids = []
    for i, p in enumerate(parts):  # positions count from 0, like token positions
        if not p:
            raise InputError(f"{flag} {text!r} has an empty item at position {i}: {example}")
        try:
            one = parse_typed_ids(p)
        except InputError:  # thousands of digits: no vocabulary is this big
            raise InputError(f"{flag}: {p[:20]}... at position {i} is too large to be a token id") from None
        if one is None or len(one) != 1:
            raise InputError(f"{flag} {text!r}: {p!r} at position {i} is not an integer: {example}")
        ids += one
    return ids


def check_out(path: str, suffixes: tuple[str, ...], flag: str = "--out") -> Path:
    """An output file that can be created: a known suffix, an existing folder, not a folder itself."""
    out = Path(path)
    if not out.name or out.suffix.lower() not in suffixes:
        raise InputError(f"{flag} must end in {', '.join(suffixes)}, got {out.name or path!r}")
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(f"{flag} {path}: the folder {folder} {what}")
    if out.is_dir():
        raise InputError(f"{flag} {path} is a folder, not a file")
    if out.exists() and not stat.S_ISREG(out.stat().st_mode):
        raise InputError(f"{flag} {path} exists and is not a regular file (a FIFO, device or socket)")
    return out


def refuse_options(options, where: str, sep: str = ", ") -> None:
    """InputError naming the options given where they do not apply: `options` is (flag, given)
    pairs, `where` ends the sentence ("--width, --scale apply only to .png and .svg images")."""
    given = [flag for flag, on in options if on]
    if given:
        raise InputError(f"{sep.join(given)} appl{'y' if len(given) > 1 else 'ies'} {where}")


def show_notice(command: str, result) -> None:
    """What a run changed in the input (e.g. lone surrogates replaced), as one line on stderr, and
    where --truncate cut the text, what it read (as the window's notice says it)."""
    if getattr(result, "truncated", False):  # (only --truncate cuts: a text too long is refused)
        print(f"attnviz {command}: note: the text is {tokens(result.n_tokens_full)}; read "
              f"{cut_shown(result.labels, result.offsets)} (--truncate)", file=sys.stderr)
    if getattr(result, "notice", None):
        print(f"attnviz {command}: note: {result.notice}", file=sys.stderr)


# === the model a command runs ========================================================================
# Every command opens the window's model unless told (one default, whichever way attnviz is used).
MODEL_HELP = (f"model name, folder or .gguf file (default: {WINDOW_MODEL}, the window's model; "
              "attnviz models lists the others)")


def add_model(p: argparse.ArgumentParser, note: str = "") -> None:
    """--model NAME, defaulting to the window's model (`note`: what this command needs of it)."""
    p.add_argument("--model", default=WINDOW_MODEL, help=MODEL_HELP + (f"; {note}" if note else ""))


# bytes of a GGUF file from which `generate` multiplies on its blocks (the quantised kernels): its
# steps then take each logit from the unembedding's blocks instead of a float32 copy of the table,
# and its layers are packed instead of expanded, which outweighs importing numba and reading its
# LLVM library from disk (benchmarks/cold_start: Gemma 3 270M Q4_K_M's 241 MiB file above,
# SmolLM2's 94 MiB file below; predict, whose lens takes a row a layer, keeps the float32 path)
KERNELS_FROM = 192 * 2**20


def vnni_cpu(cpuinfo: str | None = None) -> bool:
    """Whether the CPU lists AVX512-VNNI and VBMI (the kernels' fastest path: engine qdot.VNNI,
    whose rule this repeats without importing numba), read from /proc/cpuinfo's flags (or
    `cpuinfo`, its text); False where there is no such file (another system) or numba is told to
    compile for a named CPU or feature set (qdot then takes no host feature)."""
    if cpuinfo is None and ({"NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"} & set(os.environ)):
        return False
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = next((line for line in f if line.startswith("flags")), "")
        except OSError:
            return False
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines()
                  if line.startswith("flags") and ":" in line), [])
    return {"avx512_vnni", "avx512vbmi"} <= set(flags)


# --max-new from which a GGUF file of any size takes the kernels: each step on them is faster than
# on the float32 path, and that many steps repay numba's start-up (benchmarks/gen_length: where
# the two paths' whole processes cross on SmolLM2; later without VNNI, whose steps gain less)
KERNELS_STEPS = 12 if vnni_cpu() else 41


def wants_kernels(where: Path, max_new: int = 0) -> bool:
    """Whether a generation of up to `max_new` tokens on the model at `where` (a folder, or a GGUF
    file as registry.resolve gives it) takes the quantised kernels: a GGUF file of at least
    KERNELS_FROM bytes, or any GGUF file for at least KERNELS_STEPS new tokens."""
    return where.is_file() and (max_new >= KERNELS_STEPS or where.stat().st_size >= KERNELS_FROM)


def load_for_generation(name: str, text: str | None = None, max_new: int = 0):
    """load_model(name) for `generate` of up to `max_new` tokens. Where wants_kernels says so, the
    GGUF file's layers and unembedding are packed from its blocks for the quantised kernels
    (engine/reading/qpack.py) instead of expanded to float32, and the kernels take one thread
    each, as a short run's BLAS products do (blas_for): a thread waiting on one the system has
    not scheduled spins. A generation step's layers take two threads where there are 2 cores
    (parallel.step_pair: onerow_pair, which falls back to one thread while the second core is
    busy elsewhere). A prompt of ROWS_UNEXPANDED tokens or more still expands the layers.
    `text`: the prompt (load_model's)."""
    from attnviz.engine import load_model
    from attnviz.engine.reading.registry import resolve

    if wants_kernels(resolve(name)[1], max_new):
        from attnviz.engine.parallel import limit_kernel_threads
        from attnviz.engine.reading.qpack import ask_for_kernels

        ask_for_kernels()
        limit_kernel_threads(1, wide=None, pair_steps=True)
    return load_model(name, text=text)


def load_for_one_pass(name: str, text: str | None = None):
    """load_model(name) for a command that runs its text through the layers once (predict): a GGUF
    file's layers are expanded when the run reaches each one and let go after it (a budget of one
    layer, budget.LayerStore.set_budget), so the command fills one layer's memory, not every
    layer's at once: the same values from the same dequantisers, the same products. What asks
    for a layer again (an ablation's run from its first edited layer) expands it again. `text`:
    the text it will encode (load_model's)."""
    from attnviz.engine import load_model

    model = load_model(name, eager=False, text=text)  # (GGUF: no layer read at load)
    layers = model.weights.layers
    if Path(model.path).is_file() and layers.sizes and layers.expansions == 0:
        layers.set_budget(max(layers.sizes))
    return model


def prediction_head(model, command: str):
    """The model's unembedding (Model.lm_head) for a command that predicts the next token; a
    model without one is refused in one line that names a model that has one: a decoder for an
    encoder, a file that holds them for a decoder whose file lacks its final norm or unembedding."""
    from attnviz.engine.errors import NoPrediction

    try:
        return model.lm_head()
    except NoPrediction as exc:
        if model.name == WINDOW_MODEL:
            raise
        needs = ("a causal language model" if not model.config.causal else
                 "a model whose file holds a usable final norm and unembedding")
        raise NoPrediction(f"{exc}; `attnviz {command}` needs {needs}, such as "
                           f"--model {WINDOW_MODEL}") from None


FEW_ROWS = 128  # tokens: up to this many, a run's products are too small to share between BLAS threads


def blas_for(n: int):
    """A context for a command's run of `n` tokens: one BLAS thread for up to FEW_ROWS tokens (as the
    window runs its keystrokes, ui/machinery/runner.py), BLAS's own threads for more. A short
    run's products gain nothing from a second thread, and a BLAS thread waiting on one the system
    has not scheduled spins: on a busy machine that multiplies a short run's time. The products
    are the same bits either way (tests/cli/test_cold_start_cli.py)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas") if n <= FEW_ROWS else contextlib.nullcontext()
