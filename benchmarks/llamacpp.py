"""SmolLM2's decode step through llama.cpp beside attnviz's, on the same GGUF file (the bundled
Q4_1), the same token ids and the same threads, in turns (not a test; no goal: issue #45 asks for
the ratio to be reported).

- the step: the context already holds T - 1 tokens (T = 64 and 512) and one more is run through
  every layer to the next-token logits over the whole vocabulary, each step going back to the same
  T - 1 tokens (the same T every step).
  - attnviz: what a generation step does (engine/computing/generate.py): run_step of the T ids
    with the generation's own cache (generate._StepTrace: K and V appended in place, no patterns)
    and head.logits of its last row (the final RMSNorm and the unembedding, on its packed Q8_0
    blocks). The cache taken back to T - 1 tokens before each step (qsteps.back_to) is not timed.
  - llama.cpp (llama-cpp-python): Llama.eval([token]) after Llama.n_tokens is set back to T - 1:
    its KV cache cut back to T - 1 positions (llama_memory_seq_rm) and one llama_decode of the
    token, which computes the logits of its row. Its KV cache is float16 (attnviz's float32);
    flash attention off (llama-cpp-python's default).
  Each round runs the same fresh tokens on both sides, in turns (the side that goes first
  alternates); the first round warms both and is not counted. Medians of every step.
- ratio: attnviz / llama.cpp (above 1: llama.cpp is faster).
- floors: each step against the time one thread takes for a plain read of the bytes (benchmarks/
  streaming.py), measured in the same run (the fastest of every read: 3 beside each round's
  steps, in turns, and 25 after each T's): the layers' packed arrays (the floor of qsteps' goal,
  which times the layers' step without the unembedding), and those with the unembedding's packed
  blocks too (what a step with its logits reads at least; both sides read the same Q8_0 table).
  The top token of both sides' logits is compared each step: the same file on the same ids (the
  two round activations differently, so a near tie may differ).

llama.cpp is not a dependency: it runs in a child process on a Python that imports llama_cpp, by
default .devvenv/bin/python beside the repository (or beside the main checkout of a git
worktree). Where none does, the llama.cpp figures are recorded as not measured, with the reason.

    python -m benchmarks.llamacpp [--llama-python PATH] [--threads 1] [--rounds 8] [--steps 10]

Writes benchmarks/results/llamacpp.json (benchmarks/record.py); each figure's note has the
machine's load average, llama.cpp's step's note its version and build (llama_print_system_info:
AVX-512, VNNI...), also in the file's details (or why llama.cpp was not available).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.record import ROOT, figure, write

TS = (64, 512)
N_CTX = 1024  # llama.cpp's context: room for T = 512 and its prompt


def default_pythons(root: Path = ROOT) -> list[Path]:
    """.devvenv/bin/python beside the repository, then beside the main checkout where `root` is
    a git worktree of it (its common git folder's parent), those that exist."""
    found = [Path(root) / ".devvenv" / "bin" / "python"]
    try:
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        common = ""
    if common:
        found.append((Path(root) / common).resolve().parent / ".devvenv" / "bin" / "python")
    out = []
    for p in found:
        if p.is_file() and p not in out:
            out.append(p)
    return out


def imports_llama_cpp(python: Path) -> str:
    """'' where `python` runs and imports llama_cpp, else why not, in one line."""
    if not Path(python).is_file() or not os.access(python, os.X_OK):
        return f"{python}: no such Python"
    try:
        out = subprocess.run([str(python), "-c", "import llama_cpp"], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{python}: {exc}"
    if out.returncode == 0:
        return ""
    last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
    return f"{python} cannot import llama_cpp ({last})"


def find_llama_python(given: str | None, root: Path = ROOT) -> tuple[str | None, str]:
    """(a Python that imports llama_cpp, '') or (None, why none): `given` alone where given, else
    default_pythons(root) in turn."""
    candidates = [Path(given)] if given else default_pythons(root)
    if not candidates:
        return None, f"no .devvenv/bin/python beside {root} (give --llama-python)"
    whys = []
    for python in candidates:
        why = imports_llama_cpp(python)
        if not why:
            return str(python), ""
        whys.append(why)
    return None, "; ".join(whys)


class LlamaError(Exception):
    """llama.cpp's child process failed; the message says how."""


class LlamaChild:
    """llama.cpp in a child process on `python` (child() below), timing steps when asked."""

    def __init__(self, python: str, gguf: Path, threads: int):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.err_text = ""
        self.proc = subprocess.Popen(
            [python, "-m", "benchmarks.llamacpp", "--child", str(gguf), "--threads", str(threads)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.info = self._answer()

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.close()
            tail = (self.err_text.strip().splitlines() or [""])[-1]
            raise LlamaError(f"llama.cpp's process ended (exit status {self.proc.returncode}): {tail}")
        return json.loads(line)

    def steps(self, prompt: list[int], tokens: list[int]) -> dict:
        """{'ms': [...], 'top': [...]}: each token run after `prompt` (its T - 1 tokens)."""
        try:
            self.proc.stdin.write(json.dumps({"prompt": prompt, "tokens": tokens}) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # (the process ended: _answer says how)
        return self._answer()

    def close(self) -> None:
        """End the process (its stdin closed: child() returns) and keep what it wrote to stderr."""
        if self.err.closed:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.err.seek(0)
        self.err_text = self.err.read()
        self.err.close()


def child(gguf: str, threads: int) -> None:
    """In the llama Python: load the file, say what llama.cpp is, then time the steps asked for on
    stdin (one JSON request a line, one answer a line on stdout)."""
    import numpy as np
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=N_CTX, n_batch=N_CTX, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    n_vocab = llm.n_vocab()
    print(json.dumps({"version": llama_cpp.__version__,
                      "system": llama_cpp.llama_print_system_info().decode().strip(" |"),
                      "flash_attn": int(llm.context_params.flash_attn_type),
                      "type_k": int(llm.context_params.type_k)}), flush=True)
    prompt = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["prompt"] != prompt:
            prompt = req["prompt"]
            llm.reset()
            llm.eval(prompt)
        ms, top = [], []
        for token in req["tokens"]:
            llm.n_tokens = len(prompt)  # back to T - 1 tokens: eval cuts its KV cache there
            t0 = time.perf_counter()
            llm.eval([token])
            ms.append((time.perf_counter() - t0) * 1e3)
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
            top.append(int(np.argmax(logits)))
        print(json.dumps({"ms": ms, "top": top}), flush=True)


def about_llama(info: dict) -> str:
    """llama.cpp's version and build, as a note says it."""
    return (f"llama-cpp-python {info['version']}, KV cache type {info['type_k']} (1: float16), flash "
            f"attention {'on' if info['flash_attn'] == 1 else 'off'}; build: {info['system']}")


def step_figures(T: int, ours: dict, llama: dict | None, floors: dict, *, why: str = "",
                 about: str = "", load: float = 0.0) -> list[dict]:
    """The figures of the steps at T. ours: {'ms', 'layers', 'head'} lists (ms of each step, and
    of its two parts); llama: {'ms', 'agree'} or None (not available: `why`); floors: ms of
    {'layers', 'all'} (the layers' packed bytes, and with the unembedding's) and their 'bytes'.
    Every note ends with the load average."""
    a = statistics.median(ours["ms"])
    lay, head = statistics.median(ours["layers"]), statistics.median(ours["head"])
    fl, fa = floors["layers"], floors["all"]
    mb = {k: floors["bytes"][k] / 1e6 for k in ("layers", "all")}
    floor_layers = (f"floor {fl:.2f} ms: one thread's plain read of the layers' {mb['layers']:.0f} MB "
                    f"of packed blocks (the floor of qsteps' goal, which counts no unembedding)")
    floor_all = (f"floor {fa:.2f} ms: one thread's plain read of the {mb['all']:.0f} MB of the layers' "
                 f"and the unembedding's packed blocks")
    step = f"decode step T = {T}"
    rows = [(f"{step}, attnviz", a, "ms", ours["ms"],
             f"generate.run_step of one new token on a generation's cache and head.logits "
             f"of its row; medians: layers {lay:.2f} ms, unembedding {head:.2f} ms"),
            (f"{step}: attnviz's layers / quantised-bytes floor", lay / fl, "x",
             [v / fl for v in ours["layers"]],
             f"the step's run_step alone, on --threads threads (qsteps' goal, <= 1.3, times generate's "
             f"way: two threads where the pair pays); {floor_layers}"),
            (f"{step}: attnviz / floor of the layers' and unembedding's bytes", a / fa, "x",
             [v / fa for v in ours["ms"]], floor_all)]
    # (llama.cpp's step is read against the floor of all it reads only: no split of it is timed)
    names = (f"{step}, llama.cpp", f"{step}: attnviz / llama.cpp",
             f"{step}: llama.cpp / floor of the layers' and unembedding's bytes")
    if llama is None:
        rows += [(name, None, "ms" if name == names[0] else "x", [], f"llama.cpp not available: {why}")
                 for name in names]
    else:
        b = statistics.median(llama["ms"])
        rows += [(names[0], b, "ms", llama["ms"],
                  f"Llama.eval of one new token after T - 1 (one llama_decode, its row's logits); in "
                  f"turns with attnviz's; the top token the same as attnviz's in {llama['agree']} of "
                  f"{len(llama['ms'])} steps; {about}"),
                 (names[1], a / b, "x", [a / b],
                  f"medians {a:.2f} / {b:.2f} ms, the same tokens in turns (above 1: llama.cpp faster)"),
                 (names[2], b / fa, "x", [v / fa for v in llama["ms"]], floor_all)]
    return [figure(name, value, unit, runs=runs, note=f"{note}; load average {load:.1f}")
            for name, value, unit, runs, note in rows]


def _ours(model, head, cache, prompt: list[int], tokens: list[int]) -> dict:
    """attnviz's steps (module docstring): ms of each, of its run (generate.run_step) and of its
    head.logits."""
    import numpy as np

    from attnviz.engine.computing.generate import run_step
    from benchmarks.qsteps import back_to

    out: dict = {"ms": [], "layers": [], "head": [], "top": []}
    for token in tokens:
        back_to(cache, len(prompt))
        seq = prompt + [token]
        t0 = time.perf_counter()
        trace = run_step(model, np.asarray(seq, dtype=np.int64), False, cache)
        t1 = time.perf_counter()
        logits = head.logits(trace.final)  # [1, vocab]
        t2 = time.perf_counter()
        assert cache.reused == len(prompt) and not cache.earlier
        out["ms"].append((t2 - t0) * 1e3)
        out["layers"].append((t1 - t0) * 1e3)
        out["head"].append((t2 - t1) * 1e3)
        out["top"].append(int(np.argmax(logits[0])))
    return out


def _turns(model, head, llama: LlamaChild | None, T: int, ids: list[int], rng, rounds: int,
           steps: int, reads: dict) -> tuple[dict, dict | None]:
    """Both sides' steps at T in turns: `rounds` rounds (after one that warms) of `steps` fresh
    tokens each, the same tokens on both sides, the side that goes first alternating; each round
    also reads the floors' arrays (fastest of 3 each, appended to `reads`), so the floors are read
    in the same minutes as the steps (the memory's bandwidth drifts)."""
    from attnviz.engine.computing.generate import _StepTrace
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.computing.trace import KVCache

    prompt = ids[:T - 1]
    cache = KVCache()
    model.run(ids=prompt, trace=_StepTrace(False, cache), request=RunRequest(labels=False))
    ours: dict = {"ms": [], "layers": [], "head": []}
    theirs: dict | None = None if llama is None else {"ms": [], "agree": 0}
    for r in range(rounds + 1):
        tokens = rng.integers(100, model.config.vocab_size, steps).tolist()
        got = {}
        for side in (("ours", "read", "llama") if r % 2 else ("llama", "read", "ours")):
            if side == "read":
                if r:
                    _read_floors(reads, 3)
            elif side == "ours":
                got[side] = _ours(model, head, cache, prompt, tokens)
            elif llama is not None:
                got[side] = llama.steps(prompt, tokens)
        if not r:
            continue  # the first round warms both
        for key in ours:
            ours[key] += got["ours"][key]
        if theirs is not None:
            theirs["ms"] += got["llama"]["ms"]
            theirs["agree"] += sum(a == b for a, b in zip(got["ours"]["top"], got["llama"]["top"]))
    return ours, theirs


def _floor_reads(store, head) -> dict:
    """The floors' arrays: the layers' packed arrays, and those and the unembedding's, with the
    reads of each (ms lists, empty) and their bytes."""
    from benchmarks.pair_floor import packed_arrays, part_arrays  # (the floor of qsteps' goal: the same arrays)

    layers = packed_arrays(store)
    unembedding = part_arrays(p for _, p in head.packed.parts)
    arrays = {"layers": layers, "all": layers + unembedding}
    return {"arrays": arrays, "ms": {k: [] for k in arrays},
            "bytes": {k: sum(int(a.nbytes) for a in v) for k, v in arrays.items()}}


def _read_floors(reads: dict, repeat: int) -> None:
    """One thread's plain read of each floor's arrays, the fastest of `repeat`, appended to reads."""
    from benchmarks.streaming import read_ms

    for k, arrays in reads["arrays"].items():
        reads["ms"][k].append(read_ms(arrays, repeat)[0])


def _floors(reads: dict) -> dict:
    """Each floor: the fastest read of the run (those beside the steps and after each T's)."""
    return {"layers": min(reads["ms"]["layers"]), "all": min(reads["ms"]["all"]), "bytes": reads["bytes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-python", default=None,
                    help="a Python that imports llama_cpp (default: .devvenv/bin/python beside the "
                         "repository, or beside the main checkout of a git worktree)")
    ap.add_argument("--threads", type=int, default=1,
                    help="threads on both sides (default 1: what generate gives a step)")
    ap.add_argument("--rounds", type=int, default=8, help="rounds in turns after the warm one")
    ap.add_argument("--steps", type=int, default=10, help="steps a side a round")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # (the llama Python's side)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.threads)
        return
    import numpy as np
    from threadpoolctl import threadpool_limits

    from attnviz.engine.computing.load import load_model
    from attnviz.engine.parallel import limit_kernel_threads
    from attnviz.engine.reading.qpack import ask_for_kernels
    from benchmarks.smollm2 import smollm2_path

    threadpool_limits(args.threads, user_api="blas")
    limit_kernel_threads(args.threads, wide=None)  # (the unembedding too: as generate's steps)
    ask_for_kernels()
    model = load_model("SmolLM2-135M-Instruct")
    head = model.lm_head()
    python, why = find_llama_python(args.llama_python)
    llama, about = None, ""
    if python is not None:
        try:
            llama = LlamaChild(python, smollm2_path(), args.threads)
            about = about_llama(llama.info)
        except LlamaError as exc:
            why = str(exc)
    print(f"llama.cpp: {about or 'not available: ' + why}; {args.threads} thread(s) each", flush=True)
    rng = np.random.default_rng(0)
    ids = rng.integers(100, model.config.vocab_size, max(TS)).tolist()
    figs = []
    reads = _floor_reads(model.weights.layers, head)  # (one run's reads: both T's floors take the fastest)
    runs = []
    try:
        for T in TS:  # (a LlamaError here: llama.cpp's process ended mid-run, the message says how)
            runs.append((T, *_turns(model, head, llama, T, ids, rng, args.rounds, args.steps, reads),
                         os.getloadavg()[0]))
            _read_floors(reads, 25)
    finally:
        if llama is not None:
            llama.close()
    floors = _floors(reads)  # (the fastest read of the whole run, for every T)
    for T, ours, theirs, load in runs:
        figs += step_figures(T, ours, theirs, floors, why=why, about=about, load=load)
        a = statistics.median(ours["ms"])
        line = f"step T = {T}: attnviz {a:.2f} ms"
        if theirs is not None:
            b = statistics.median(theirs["ms"])
            line += (f", llama.cpp {b:.2f} ms, attnviz / llama.cpp {a / b:.2f}x; llama.cpp / floor "
                     f"{b / floors['layers']:.2f}x (layers), {b / floors['all']:.2f}x (with the "
                     f"unembedding); top token agrees {theirs['agree']}/{len(theirs['ms'])}")
        print(f"{line}; attnviz's layers / floor {statistics.median(ours['layers']) / floors['layers']:.2f}x; "
              f"floors {floors['layers']:.2f} / {floors['all']:.2f} ms  load {load:.1f}", flush=True)
    found = llama.info if llama is not None else {"not available": why}
    print(f"wrote {write('llamacpp', figs, details={'llama.cpp': found})}")


if __name__ == "__main__":
    main()
