"""A corpus scan: plan the batches (what is left to do in DIR), then run them on Dask (a
LocalCluster of processes, or an existing cluster by its scheduler address) or in this process.

Dask schedules the batches, reruns the batch of a worker that dies on another worker, and the
atomic per-batch files make a rerun of the same command continue where an interrupted one stopped.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from attnviz.corpus import DEFAULT_BATCH, DEFAULT_EXAMPLES, store
from attnviz.corpus.source import Corpus, read_corpus
from attnviz.corpus.tasks import Batch, BatchDone, run_batch, run_batch_and_report
from attnviz.engine.parallel import cores
from attnviz.engine.errors import AttnvizError, InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    out: Path
    manifest: store.Manifest
    todo: list  # [Batch] not finished yet
    n_done: int  # batches finished before this run

    @property
    def n_batches(self):
        return self.manifest.n_batches


def make_manifest(model, model_source: str, corpus: Corpus, options: dict) -> store.Manifest:
    n = len(corpus)
    b = options["batch"]
    return store.Manifest(model=model_source, model_name=model.name,
                          model_sha256=store.model_sha256(model.path),
                          n_layer=model.config.n_layer, n_head=model.config.n_head,
                          corpus=str(corpus.path), corpus_sha256=corpus.sha256, n_texts=n,
                          n_batches=(n + b - 1) // b, options=dict(options))


def plan_scan(out, model, model_source: str, corpus: Corpus, options: dict) -> Plan:
    """Check DIR (new, empty, or a scan of the same model, corpus and options) and list the batches
    left to run. Writes scan.json for a new scan."""
    out = Path(out)
    new = make_manifest(model, model_source, corpus, options)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder")
    if (out / store.MANIFEST).exists():
        old = store.read_manifest(out)
        diff = store.differences(old, new)
        if diff:
            raise InputError(f"{out} holds a scan made with {'; '.join(diff)}: give another --out "
                             "(or remove that folder) to start a new scan")
    elif out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
        raise InputError(f"--out {out} is a folder with files but no {store.MANIFEST}: give a new "
                         "or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    if not (out / store.MANIFEST).exists():
        store.write_manifest(out, new)
    store.remove_leftovers(out)
    done = store.finished_batches(out, new.n_batches)
    b = options["batch"]
    todo = []
    for i in range(new.n_batches):
        if i in done:
            continue
        ids = tuple(range(i * b, min((i + 1) * b, len(corpus))))
        todo.append(Batch(out=str(out.resolve()), index=i, text_ids=ids,
                          texts=tuple(corpus.texts[t] for t in ids),
                          read_errors={t: corpus.errors[t] for t in ids if t in corpus.errors},
                          model=model_source, model_sha256=new.model_sha256,
                          max_tokens=options.get("max_tokens"), examples=options["examples"]))
    return Plan(out=out, manifest=new, todo=todo, n_done=len(done))


def finish(plan: Plan) -> store.Manifest:
    """After every batch: DIR/errors.parquet and scan.json marked complete."""
    n_errors = store.write_errors_file(plan.out)
    m = store.Manifest(**{**plan.manifest.__dict__, "complete": True, "n_errors": n_errors})
    store.write_manifest(plan.out, m)
    return m


class Progress:
    """Texts done, texts/s and an ETA on stderr: one updating line on a terminal, else a line every
    few seconds."""

    def __init__(self, total_texts: int, done_texts: int = 0, stream=None, every: float = 5.0):
        self.stream = stream or sys.stderr
        self.total = total_texts
        self.done = done_texts
        self.start_done = done_texts
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.last = 0.0
        self.every = every
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def rate(self) -> float:
        dt = time.perf_counter() - self.t0
        return (self.done - self.start_done) / dt if dt > 0 else 0.0

    def line(self) -> str:
        r = self.rate()
        left = self.total - self.done
        eta = _clock(left / r) if r > 0 else "?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.done}/{self.total} texts ({pct:.0f}%)  {r:.1f} texts/s  "
                f"{self.tokens / max(time.perf_counter() - self.t0, 1e-9):.0f} tokens/s  ETA {eta}")

    def update(self, done: BatchDone) -> None:
        self.done += done.n_texts
        self.tokens += done.n_tokens
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + self.line() + "\x1b[K")
            self.stream.flush()
        elif now - self.last >= self.every or self.done == self.total:
            self.last = now
            print(self.line(), file=self.stream, flush=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run_in_process(plan: Plan, progress: Progress | None = None) -> list:
    """Every batch left, one after another in this process (no Dask): the reference the cluster's
    result is checked against, and the benchmark's plain loop."""
    done = []
    for batch in plan.todo:
        d = run_batch(batch)
        done.append(d)
        if progress:
            progress.update(d)
    return done


# The local cluster's own upkeep, slowed down: Dask's defaults spend CPU that a small machine's
# workers need on checks that batches of seconds each do not need that often (the event-loop tick
# monitor, the system monitor, the nanny's memory check, work stealing); a worker over its memory
# limit is still stopped, within a second (benchmarks/scan.py measures the scan).
QUIET_CLUSTER = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "200ms",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.scheduler.work-stealing-interval": "1s",
    # glibc's own malloc tuning instead of Dask's MALLOC_TRIM_THRESHOLD_=65536: setting any malloc
    # threshold freezes glibc's moving mmap threshold (worker_model's mallopt only sets it high
    # again, for a cluster given with --scheduler): the tasks take less CPU without the variable
    # (benchmarks/scan.py measures it).
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


def local_cluster(n_workers: int):
    """A LocalCluster of `n_workers` processes, one thread each (one BLAS thread: Dask's nanny
    sets OMP/MKL/OpenBLAS_NUM_THREADS=1 before a worker starts, and each task caps BLAS again).
    Every process listens on the loopback interface only, the scheduler's HTTP server included
    (Dask binds that one to every interface unless told a host; it starts it even with
    dashboard_address=None, on 8787, warning when that port is taken): it gets a free port of the
    system's choosing. The workers do not sample their task's stack every 10 ms for the
    dashboard's profile (a thread that takes the GIL from the task 100 times a second, for a page
    nobody opens).
    This process's environment is left as it was: each nanny writes its workers' variables
    (OMP_NUM_THREADS=1, ...) into os.environ before it spawns a worker, and writes them again
    before a restart, so they are taken back out once the workers are up."""
    import dask
    from dask.distributed import LocalCluster

    before = dict(os.environ)
    try:
        with dask.config.set(QUIET_CLUSTER):  # the nannies keep it for their workers
            return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                silence_logs=logging.ERROR)
    finally:
        restore_environment(before)


_CLOSING_HEARTBEAT = "Failed to communicate with scheduler during heartbeat"


class _ClosingHeartbeat(logging.Filter):
    """Drops the error a worker of the scan's own cluster logs when its heartbeat meets the
    connection its own closing shut (a race of Dask's shutdown on a loaded machine, with a
    traceback); the same error while the worker runs is kept."""

    def __init__(self, worker):
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        closing = getattr(getattr(self.worker, "status", None), "name", "") in (
            "closing", "closed", "closing_gracefully")
        return not (closing and record.getMessage().startswith(_CLOSING_HEARTBEAT))


def quiet_closing_heartbeats(dask_worker) -> None:
    """On a worker (Client.run): its closing heartbeat's error left out (_ClosingHeartbeat)."""
    logging.getLogger("distributed.worker").addFilter(_ClosingHeartbeat(dask_worker))


def restore_environment(before: dict) -> None:
    """Make os.environ equal `before` again (what a LocalCluster's nannies added or changed)."""
    for key in set(os.environ) - set(before):
        del os.environ[key]
    for key, value in before.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


@contextmanager
def dask_logs(verbose: bool):
    """Dask's own INFO lines (a cluster starting, connecting, closing) only when `verbose`: they
    would reach stderr through the handler the command line sets on the root logger. Its warnings
    and errors (a worker that died, a port taken) are shown either way."""
    import distributed  # noqa: F401 - its import sets the logger's level from Dask's config

    logger = logging.getLogger("distributed")
    old = logger.level
    if not verbose:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(old)


def run_on_dask(plan: Plan, *, scheduler: str | None = None, workers: int | None = None,
                progress: Progress | None = None, client=None, verbose: bool = False) -> list:
    """Every batch left, as Dask tasks: on `client`, on the cluster at `scheduler`, or on a new
    LocalCluster of `workers` processes (closed afterwards). A batch that raises stops the scan
    (the finished batches stay); a worker that dies has its batch rerun elsewhere by Dask. Dask's
    own INFO lines only when `verbose`."""
    with dask_logs(verbose):
        return _run_on_dask(plan, scheduler, workers, progress, client)


def _run_on_dask(plan: Plan, scheduler, workers, progress, client) -> list:
    from dask.distributed import Client

    cluster = None
    own = client is None
    before = dict(os.environ)  # a worker restarted mid-scan writes its variables again
    try:
        if client is None:
            if scheduler:
                try:
                    client = Client(scheduler, timeout="15s")
                except OSError as exc:
                    raise InputError(f"--scheduler {scheduler}: cannot reach a Dask scheduler "
                                     f"({exc})") from None
            else:
                cluster = local_cluster(workers or cores())
                client = Client(cluster)
                client.run(quiet_closing_heartbeats)
        return _submit_all(client, plan, progress)
    finally:
        if own and client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
            restore_environment(before)


def longest_first(batches) -> list:
    """The batches, longest first (their texts' characters, for their tokens): the last tasks to
    start are short ones, and workers finish together instead of one waiting on a long last task."""
    return sorted(batches, key=lambda b: -sum(map(len, b.texts)))


def _submit_all(client, plan: Plan, progress: Progress | None) -> list:
    from dask.distributed import KilledWorker, as_completed

    run_id = uuid.uuid4().hex[:8]
    if progress:
        progress.t0 = time.perf_counter()  # the rate from the first task on, not the cluster's start
    # one client.map sends them all in one message, and the scheduler runs them in its list's order
    order = longest_first(plan.todo)
    topic = f"attnviz-scan-{run_id}"
    reported = {}  # batch index -> BatchDone, from the workers' events (run_batch_and_report)
    client.subscribe_topic(topic, lambda event: _note_done(reported, event[1]))
    futures = client.map(run_batch_and_report, order, topic=topic, pure=False,
                         key=[f"attnviz-batch-{b.index:06d}-{run_id}" for b in order])
    done = []
    try:
        for fut in as_completed(futures):
            d = reported.pop(_batch_of(fut), None) if fut.status == "finished" else None
            if d is None:  # an error, or no event (yet): the result itself, from the worker
                try:
                    d = fut.result()
                except AttnvizError as exc:  # a worker's model is not the scan's
                    raise InputError(f"batch {_batch_of(fut)}: {exc}") from None
                except KilledWorker:
                    raise InputError(
                        f"batch {_batch_of(fut)} killed the workers that ran it (out of memory? "
                        "--max-tokens caps the [n_layer, n_head, T, T] patterns of long texts); "
                        "the finished batches are kept: rerun to resume") from None
            done.append(d)
            if progress:
                progress.update(d)
            fut.release()
    finally:
        left = [f for f in futures if not f.done()]
        if left:  # (cancelling none still asks the scheduler, whose answer then meets a closed client)
            client.cancel(left)
        client.unsubscribe_topic(topic)
    return done


def _note_done(reported: dict, msg: dict) -> None:
    """A worker's event: the BatchDone of a batch it finished (in the client's event loop). The
    scheduler adds the worker's address to the message; only BatchDone's fields are read."""
    reported[msg["index"]] = BatchDone(**{f: msg[f] for f in BATCH_DONE_FIELDS})


BATCH_DONE_FIELDS = tuple(f.name for f in fields(BatchDone))


def _batch_of(fut) -> int:
    return int(str(fut.key).split("-")[2])


def scan(out, model_source: str, corpus_path, *, split="lines", column=None,
         batch=DEFAULT_BATCH, max_tokens=None, examples=DEFAULT_EXAMPLES, workers=None,
         scheduler=None, client=None, in_process=False, progress_stream=None,
         model=None, on_plan=None, verbose=False) -> tuple:
    """The whole scan; -> (Manifest, [BatchDone] of this run). `on_plan(plan)` is called once the
    folder and the inputs are checked, before any batch runs. Dask's own INFO lines only when
    `verbose`."""
    from attnviz.engine import load_model

    if batch < 1 or examples < 1:
        raise InputError("--batch and --examples must be at least 1")
    corpus = read_corpus(corpus_path, split=split, column=column)
    model = model or load_model(model_source)
    options = {"split": split if corpus.path.suffix.lower() == ".txt" else None,
               "column": column, "batch": batch, "max_tokens": max_tokens, "examples": examples}
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    with store.ScanLock(out):
        plan = plan_scan(out, model, model_source, corpus, options)
        done_texts = sum(len(range(i * batch, min((i + 1) * batch, len(corpus))))
                         for i in store.finished_batches(out, plan.n_batches))
        if on_plan:
            on_plan(plan)
        progress = Progress(len(corpus), done_texts, stream=progress_stream)
        try:
            if not plan.todo:
                results = []
            elif in_process:
                results = run_in_process(plan, progress)
            else:
                results = run_on_dask(plan, scheduler=scheduler, workers=workers,
                                      progress=progress, client=client, verbose=verbose)
        finally:
            progress.close()
        return finish(plan), results
