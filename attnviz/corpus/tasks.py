"""One scan task: a batch of texts through the engine, its tables written to the scan folder.

`run_batch` is what a Dask worker runs (and what the in-process loop calls): the model is loaded
once per process and kept (`worker_model`), never sent with a task; the task carries only the texts
and the names of things. The engine code inside is the one the window calls.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from attnviz.engine.analysing import corpus_stats as S
from attnviz.engine.parallel import limit_cores
from attnviz.engine.errors import AttnvizError, InputError
from attnviz.engine.computing.request import RunRequest

log = logging.getLogger(__name__)

_MODELS: dict = {}  # (source, sha256) -> Model: one per process, loaded by the first task


@dataclass(frozen=True)
class Batch:
    """What a task needs: where to write, which texts (with the errors reading found), which model
    (by the name or path it loads from, and the hash it must have) and the options."""

    out: str
    index: int
    text_ids: tuple
    texts: tuple
    read_errors: dict = field(default_factory=dict)  # text_id -> why the entry is not a text
    model: str = ""
    model_sha256: str = ""
    max_tokens: int | None = None
    examples: int = 20


@dataclass(frozen=True)
class BatchDone:
    index: int
    n_texts: int
    n_tokens: int
    n_errors: int
    seconds: float  # compute and write, in the task
    host: str = ""
    cpu_seconds: float = 0.0  # the CPU time of the thread that ran the task, in it


def worker_model(source: str, sha256: str = ""):
    """The model this process keeps for `source`, loaded on first use with one BLAS thread. A model
    whose files hash differently from the scan's is refused (a worker on another machine must open
    the same model)."""
    key = (source, sha256)
    model = _MODELS.get(key)
    if model is None:
        from threadpoolctl import threadpool_limits

        from attnviz.corpus.store import model_sha256
        from attnviz.engine import load_model

        threadpool_limits(limits=1)  # one BLAS thread per worker: the workers are the parallelism
        if in_dask_worker():  # and one core for the engine's own threads (a GGUF load's
            limit_cores(1)  # dequantising), not one per core in each of the workers
        malloc_like_default()
        model = load_model(source)
        if sha256:
            found = model_sha256(model.path)
            if found != sha256:
                raise InputError(f"the model {source!r} on {socket.gethostname()} has sha256 "
                                 f"{found[:12]}, not the scan's {sha256[:12]}")
        _MODELS.clear()  # keep one model per process
        _MODELS[key] = model
    return model


def in_dask_worker() -> bool:
    """Whether this code runs in a Dask worker's task (the in-process loop is none)."""
    try:
        from distributed import get_worker

        get_worker()
        return True
    except (ImportError, ValueError):
        return False


# glibc's mallopt parameters (malloc.h) and the ceiling of its own dynamic mmap threshold on 64-bit
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_MAX = 32 * 2 ** 20


def malloc_like_default() -> bool:
    """Undo what MALLOC_TRIM_THRESHOLD_ in the environment does to a process's heap; -> whether it
    did (only where that variable is set and the C library is glibc).

    Dask's nanny starts every worker with MALLOC_TRIM_THRESHOLD_=65536 (its config's
    distributed.nanny.pre-spawn-environ). Setting any glibc malloc threshold also freezes the mmap
    threshold at 128 KiB, which otherwise rises to the size of the largest block freed (up to
    32 MiB): so in a worker every array over 128 KiB (a layer's [n_head, T, T] patterns, the
    statistics' temporaries) is a fresh mmap, zero-filled page by page and unmapped when freed, so
    a task runs slower than in a plain process (benchmarks/scan.py). This sets the mmap
    threshold to glibc's own ceiling and the trim threshold to twice it, as glibc's dynamic rule
    does, so a worker reuses its heap like the in-process loop. A process without the variable
    (the in-process loop, the window) is left alone."""
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
            return False
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
        return libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX) == 1 and ok
    except (OSError, AttributeError):
        return False


def compute_batch(model, batch: Batch) -> dict:
    """A batch's rows: {table: pyarrow.Table} for heads, examples, texts, errors; and the token count
    under "n_tokens"."""
    import pyarrow as pa

    from attnviz.corpus.store import schemas
    from attnviz.engine.analysing.heads import unknown_token_ids

    unk = unknown_token_ids(model)
    c = model.config
    heads_cols = {name: [] for name in ("text_id", "n_tokens") + S.HEAD_STATS}
    errors, parts, labels = [], [], {}
    n_tokens = 0
    kept = [(i, t) for i, t in zip(batch.text_ids, batch.texts) if i not in batch.read_errors]
    runs = {}  # text_id -> RunResult or the error of its run, as the batch's passes end
    results = _run_many(model, [t for _, t in kept], batch.max_tokens)  # (position, result), lazily
    for text_id, text in zip(batch.text_ids, batch.texts):
        why = batch.read_errors.get(text_id)
        if why is None:
            try:
                while text_id not in runs:  # the texts' rows go through the weights together
                    j, r = next(results)
                    runs[kept[j][0]] = r
                result = runs.pop(text_id)
                if isinstance(result, BaseException):
                    raise result
                stats = S.text_statistics(result.attentions, result.input_ids, unk)
            except AttnvizError as exc:
                why = str(exc)
            except Exception as exc:  # noqa: BLE001 - one text's failure is recorded, the scan goes on
                why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            errors.append({"text_id": text_id, "text": text, "error": why})
            continue
        T = result.n_tokens
        n_tokens += T
        heads_cols["text_id"].append(np.full(c.n_layer * c.n_head, text_id, dtype=np.int64))
        heads_cols["n_tokens"].append(np.full(c.n_layer * c.n_head, T, dtype=np.int32))
        for name in S.HEAD_STATS:
            heads_cols[name].append(np.asarray(stats[name], dtype=np.float64).reshape(-1))
        parts.append(S.text_examples(result.attentions, text_id, batch.examples))
        labels[text_id] = result.labels
    n_ok = len(heads_cols["text_id"])
    layer, head = np.divmod(np.arange(c.n_layer * c.n_head), c.n_head)
    sch = schemas()
    heads = {"text_id": _cat(heads_cols["text_id"], np.int64),
             "layer": np.tile(layer, n_ok).astype(np.int32),
             "head": np.tile(head, n_ok).astype(np.int32),
             "n_tokens": _cat(heads_cols["n_tokens"], np.int32)}
    heads.update({name: _cat(heads_cols[name], np.float64) for name in S.HEAD_STATS})
    ex = S.merge_examples(parts, batch.examples)
    examples = {name: getattr(ex, name) for name in S.EXAMPLE_COLUMNS}
    examples["query_token"] = [labels[t][q] for t, q in zip(ex.text_id, ex.query_pos)]
    examples["key_token"] = [labels[t][k] for t, k in zip(ex.text_id, ex.key_pos)]
    texts = {"text_id": list(batch.text_ids), "text": list(batch.texts)}
    heads_table = pa.Table.from_arrays(  # NaN (no value) is stored as null, which SQL's avg skips
        [pa.array(heads[f.name], type=f.type, from_pandas=True) for f in sch["heads"]],
        schema=sch["heads"])
    return {
        "heads": heads_table,
        "examples": pa.Table.from_pydict(examples, schema=sch["examples"]),
        "texts": pa.Table.from_pydict(texts, schema=sch["texts"]),
        "errors": pa.Table.from_pylist(errors, schema=sch["errors"]),
        "n_tokens": n_tokens,
    }


def _run_many(model, texts, max_tokens):
    """(position in texts, RunResult or the error its run raised) for every text, a pass at a time
    (Model.iter_many: one pass's patterns held at most). Where a pass fails as a whole, its texts
    run one at a time, so that one text's failure stays its own."""
    kw = {"truncate": max_tokens is not None, "max_tokens": max_tokens}
    given = set()
    try:
        for j, result in model.iter_many(texts, **kw):
            given.add(j)
            yield j, result
    except Exception:  # noqa: BLE001 - each text left alone, to record which one fails and why
        for j, text in enumerate(texts):
            if j in given:
                continue
            try:
                yield j, model.run(text, request=RunRequest(use_cache=False, **kw))
            except Exception as exc:  # noqa: BLE001
                yield j, exc


def _cat(parts, dtype):
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def run_batch(batch: Batch) -> BatchDone:
    """Compute one batch and write its files (atomically, heads last)."""
    from attnviz.corpus.store import write_batch

    t0, c0 = time.perf_counter(), time.thread_time()
    model = worker_model(batch.model, batch.model_sha256)
    tables = compute_batch(model, batch)
    n_tokens = tables.pop("n_tokens")
    write_batch(Path(batch.out), batch.index, tables)
    return BatchDone(index=batch.index, n_texts=len(batch.texts), n_tokens=n_tokens,
                     n_errors=tables["errors"].num_rows, seconds=time.perf_counter() - t0,
                     host=socket.gethostname(), cpu_seconds=time.thread_time() - c0)


def run_batch_and_report(batch: Batch, topic: str) -> BatchDone:
    """run_batch in a Dask worker, its BatchDone also sent to the client as an event on `topic`
    (Worker.log_event: a message on the worker's open stream to the scheduler, which passes it
    on). The client reads it there instead of fetching each task's result from its worker (a
    request and answer per task, in the client, the scheduler's process and the worker), and only
    fetches the result where no event came."""
    from distributed import get_worker

    done = run_batch(batch)
    get_worker().log_event(topic, asdict(done))
    return done
