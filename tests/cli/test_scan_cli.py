"""`attnviz scan` and `attnviz scan-report`: a two-worker Dask scan equals the statistics computed
in one process, a scan interrupted (Ctrl+C of the command, a worker killed) ends with the same
Parquet content as one that was not, resuming refuses another model, corpus or options, and bad
corpus files give one clear error or rows in errors.parquet."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.engine.computing.request import RunRequest

pytest.importorskip("distributed")

MODEL = "all-MiniLM-L6-v2"
WORDS = ("the keys to the cabinet are on the table . a cat sat on the mat and the dog ran "
         "after it . she saw the bird in the tree near the house ; he read the old book").split()


def make_corpus(path: Path, n: int, seed: int = 0) -> Path:
    """n lines of 6..24 words, some with a repeated span (so duplicate and induction score)."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=int(rng.integers(6, 25))))
        if i % 3 == 0:
            words += words[:5]
        lines.append(" ".join(words))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def cluster():
    """One two-process LocalCluster for the module (starting one costs seconds)."""
    from dask.distributed import Client

    from attnviz.corpus.scan import local_cluster

    before = dict(os.environ)
    c = local_cluster(2)
    c.environment_changes = {k: (before.get(k), os.environ.get(k))
                             for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)}
    client = Client(c)
    yield c, client
    client.close()
    c.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("corpus") / "c.txt", 24)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus):
    """The same scan run in this process, without Dask."""
    out = tmp_path_factory.mktemp("ref") / "scan"
    assert main(["scan", "--model", MODEL, "--corpus", str(corpus), "--out", str(out),
                 "--workers", "0", "--batch", "2", "--examples", "5"]) == 0
    return out


def content(out: Path) -> dict:
    """Every table's rows, sorted, read back with DuckDB."""
    from attnviz.corpus import store

    return {
        "heads": store.query(out, "SELECT * FROM heads ORDER BY text_id, layer, head"),
        "examples": store.query(out, "SELECT * FROM examples ORDER BY layer, head, weight DESC, "
                                     "text_id, query_pos, key_pos"),
        "texts": store.query(out, "SELECT * FROM texts ORDER BY text_id"),
        "errors": store.query(out, "SELECT * FROM errors ORDER BY text_id"),
    }


def assert_same_content(a: Path, b: Path, tol=1e-6):
    ca, cb = content(a), content(b)
    for table in ca:
        assert len(ca[table]) == len(cb[table]), table
        for ra, rb in zip(ca[table], cb[table]):
            for x, y in zip(ra, rb):
                if isinstance(x, float) or isinstance(y, float):
                    assert (x is None and y is None) or x == pytest.approx(y, abs=tol, nan_ok=True), table
                else:
                    assert x == y, table


def test_a_two_worker_cluster_scan_equals_each_statistic_computed_in_one_process(
        cluster, corpus, reference, tmp_path, capsys):
    from attnviz.corpus import store
    from attnviz.engine.analysing import corpus_stats as S, heads as H
    from attnviz.engine import load_model

    c, client = cluster

    def count_loads():  # in each worker: count the engine's model loads from here on
        import attnviz.engine as engine

        real = engine.load_model

        def load_model(*args, **kwargs):
            load_model.calls += 1
            return real(*args, **kwargs)
        load_model.calls, load_model.real = 0, real
        engine.load_model = load_model

    def loads_and_cores():
        import attnviz.engine as engine
        from attnviz.engine.parallel import cores

        calls = engine.load_model.calls
        engine.load_model = engine.load_model.real
        return calls, cores()

    client.run(count_loads)
    out = tmp_path / "scan"
    assert main(["scan", "--model", MODEL, "--corpus", str(corpus), "--out", str(out),
                 "--scheduler", c.scheduler_address, "--batch", "2", "--examples", "5"]) == 0
    printed = capsys.readouterr()
    assert "the corpus top-K is the top-K of the batches'" in printed.out
    assert "texts/s" in printed.err and "ETA" in printed.err
    assert_same_content(out, reference)
    # every statistic against the engine here: within 1e-6 of the batch's run (Model.run_many, the
    # texts' rows through the weights together, as the scan runs them), and of each text run alone
    # within float32's precision (one product for the batch rounds a little apart from one per text:
    # a mean distance of 9.7 tokens moved by 1.2e-6)
    model = load_model(MODEL)
    unk = H.unknown_token_ids(model)
    rows = content(out)["heads"]
    texts = corpus.read_text(encoding="utf-8").splitlines()
    assert len(rows) == len(texts) * 6 * 12
    names = ("n_tokens",) + S.HEAD_STATS
    together = [r for b in range(0, len(texts), 2) for r in model.run_many(texts[b:b + 2])]
    for i, text in enumerate(texts):
        alone = model.run(text, request=RunRequest(use_cache=False))
        want = S.text_statistics(together[i].attentions, together[i].input_ids, unk)
        want_alone = S.text_statistics(alone.attentions, alone.input_ids, unk)
        for row in rows[i * 72:(i + 1) * 72]:
            text_id, layer, head, n_tokens, *vals = row
            assert text_id == i and n_tokens == alone.n_tokens
            for name, v in zip(names[1:], vals):
                assert v == pytest.approx(want[name][layer, head], abs=1e-6), name
                assert v == pytest.approx(want_alone[name][layer, head], rel=1e-6, abs=1e-6), name
    # the workers kept the model: one load per worker process, not one per task; a worker that
    # loaded it runs the engine's own threads on one core (BLAS too)
    loads = client.run(loads_and_cores)
    assert {n for n, _ in loads.values()} <= {0, 1} and sum(n for n, _ in loads.values()) >= 1
    assert {cores for n, cores in loads.values() if n} == {1}
    m = store.read_manifest(out)
    assert m.complete and m.n_texts == 24 and m.n_batches == 12 and m.n_errors == 0


def _scan_process(corpus, out, address, *extra):
    """The scan command in a new process that Ctrl+C (SIGINT) interrupts, as from a terminal: a
    test run whose SIGINT is ignored (a background CI step) would pass SIG_IGN on through exec."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler resets at exec
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "attnviz", "scan", "--model", MODEL, "--corpus", str(corpus),
             "--out", str(out), "--scheduler", address, "--batch", "2", "--examples", "5", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, before)


def _wait_for_batches(out: Path, n: int, proc, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if len(list((out / "heads").glob("batch-*.parquet"))) >= n:
            return
        try:  # the scan process ending early is the other condition
            proc.wait(0.01)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"the scan ended early: {proc.communicate()}")
    pytest.fail("no batch finished in time")


def _hold_batches(n: int, gate: str):
    """In each worker: a batch starts only while fewer than `n` batches are written, or once the file
    `gate` exists (with one thread per worker, at most n + workers batches end before the gate)."""
    import time
    from pathlib import Path

    import attnviz.corpus.tasks as tasks

    real = tasks.run_batch

    def run_batch(batch):
        heads = Path(batch.out) / "heads"
        while len(list(heads.glob("batch-*.parquet"))) >= n and not Path(gate).exists():
            time.sleep(0.01)
        return real(batch)

    run_batch.real = real
    tasks.run_batch = run_batch


def _release_batches():
    import attnviz.corpus.tasks as tasks

    tasks.run_batch = getattr(tasks.run_batch, "real", tasks.run_batch)


HEAP_CHECK = """
import ctypes, sys
import numpy as np
from attnviz.corpus.tasks import worker_model

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def where_2mb_goes():
    before = libc.mallinfo2().hblks  # blocks malloc got from mmap
    a = np.ones(1 << 18)
    after = libc.mallinfo2().hblks
    del a
    return "mmap" if after > before else "heap"

first = where_2mb_goes()
worker_model("attnviz-textbook")  # what every task calls first
print(first, where_2mb_goes())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or
                    __import__("platform").libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_a_worker_given_dasks_malloc_trim_threshold_keeps_large_arrays_on_its_heap():
    """Dask's nannies start each worker with MALLOC_TRIM_THRESHOLD_ set (the scan's own
    LocalCluster does not, but a cluster given with --scheduler may), which pins glibc's mmap
    threshold at 128 KiB (every larger array a fresh, zero-filled mmap); the task code's
    worker_model undoes that: in a process started with the variable, a 2 MB array is mmapped
    before the first task's model lookup and comes from the heap after it."""
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", HEAP_CHECK], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["mmap", "heap"]
    env.pop("MALLOC_TRIM_THRESHOLD_")  # a process without it (the in-process loop) is left alone
    out = subprocess.run([sys.executable, "-c", HEAP_CHECK], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[1] == "heap"


def test_starting_the_local_cluster_leaves_this_processs_environment_alone(cluster):
    """The nannies write their workers' variables (OMP_NUM_THREADS=1, ...) into os.environ to spawn
    them; this process (the CLI, the window, pytest) gets its own back, while the workers keep
    theirs."""
    c, client = cluster
    assert c.environment_changes == {}
    threads = client.run(lambda: __import__("os").environ.get("OMP_NUM_THREADS"))
    assert set(threads.values()) == {"1"}


def test_the_scans_local_workers_sample_no_profile_for_a_dashboard(cluster):
    """The scan's LocalCluster serves no dashboard, so its workers do not sample the running
    task's stack for one (a thread taking the GIL every 10 ms)."""
    _, client = cluster
    enabled = client.run(lambda: __import__("dask").config.get("distributed.worker.profile.enabled"))
    assert len(enabled) == 2 and set(enabled.values()) == {False}
    import dask

    assert dask.config.get("distributed.worker.profile.enabled")  # this process's config untouched


def test_the_cluster_runs_the_longest_batches_first_and_reports_each_by_an_event(
        cluster, corpus, reference, tmp_path, monkeypatch):
    """The batches go to Dask in one message, longest first (each worker starts its tasks in that
    order), and each task's BatchDone comes back as an event on the worker's open stream: the
    client asks no worker for a task's result (Future.result) unless the event is missing."""
    import distributed
    from dask.distributed import get_task_stream

    from attnviz.corpus import store
    from attnviz.corpus.scan import scan

    c, client = cluster
    asked = []
    result = distributed.Future.result
    monkeypatch.setattr(distributed.Future, "result",
                        lambda self, *a, **k: asked.append(self.key) or result(self, *a, **k))
    out = tmp_path / "scan"
    with get_task_stream(client) as stream:
        manifest, done = scan(out, MODEL, corpus, batch=2, examples=5, client=client)
    assert manifest.complete and asked == []
    assert sorted(d.index for d in done) == list(range(12))
    n_tokens = dict(store.query(out, "SELECT text_id // 2, sum(n_tokens) // 72 FROM heads GROUP BY 1"))
    assert {d.index: (d.n_texts, d.n_tokens, d.n_errors) for d in done} == {
        i: (2, n_tokens[i], 0) for i in range(12)}
    assert all(d.seconds > 0 and d.cpu_seconds > 0 for d in done)
    assert_same_content(out, reference)
    texts = corpus.read_text(encoding="utf-8").splitlines()
    length = {i: len(texts[2 * i]) + len(texts[2 * i + 1]) for i in range(12)}
    started = {}
    for task in stream.data:
        if str(task["key"]).startswith("attnviz-batch-"):
            start = min(s["start"] for s in task["startstops"] if s["action"] == "compute")
            started.setdefault(task["worker"], []).append((start, int(str(task["key"]).split("-")[2])))
    assert sum(map(len, started.values())) == 12
    for runs in started.values():
        lengths = [length[i] for _, i in sorted(runs)]
        assert lengths == sorted(lengths, reverse=True), lengths


def test_the_scans_local_cluster_keeps_its_upkeep_timers_slow(cluster):
    """Dask's defaults tick every process's event-loop monitor every 20 ms, check each worker's
    memory every 100 ms and try work stealing every 100 ms: 7 % of a 2-core machine while idle.
    The scan's cluster runs them rarer, in its workers as in the scheduler."""
    import dask

    from attnviz.corpus.scan import QUIET_CLUSTER

    c, client = cluster
    keys = sorted(QUIET_CLUSTER)
    seen = client.run(lambda: {k: __import__("dask").config.get(k) for k in keys})
    assert len(seen) == 2 and all(v == {k: QUIET_CLUSTER[k] for k in keys} for v in seen.values())
    assert dask.config.get("distributed.admin.tick.interval") != QUIET_CLUSTER[
        "distributed.admin.tick.interval"]  # this process's own config is left as it was
    timers = client.run_on_scheduler(lambda dask_scheduler: {
        k: v.callback_time for k, v in dask_scheduler.periodic_callbacks.items()})
    assert (timers["stealing"], timers["tick"], timers["monitor"]) == (1000, 200, 2000)


def test_the_scans_workers_keep_glibcs_own_malloc_tuning(cluster):
    """Dask's nannies set MALLOC_TRIM_THRESHOLD_=65536 for their workers, which freezes glibc's
    moving mmap threshold (worker_model's mallopt sets it high again, but the tasks still took
    4-8 % more CPU time than without the variable). The scan's workers do without it (while their
    BLAS stays at one thread)."""
    if "MALLOC_TRIM_THRESHOLD_" in os.environ:
        pytest.skip("this environment sets MALLOC_TRIM_THRESHOLD_ itself, which the workers inherit")
    _, client = cluster
    env = client.run(lambda: {k: os.environ.get(k)
                              for k in ("MALLOC_TRIM_THRESHOLD_", "OPENBLAS_NUM_THREADS")})
    assert len(env) == 2
    assert all(v == {"MALLOC_TRIM_THRESHOLD_": None, "OPENBLAS_NUM_THREADS": "1"}
               for v in env.values())


def test_a_scan_interrupted_with_ctrl_c_resumes_to_the_same_content(cluster, corpus, reference,
                                                                     tmp_path):
    from attnviz.corpus import store

    c, client = cluster
    out, gate = tmp_path / "scan", tmp_path / "gate"
    client.run(_hold_batches, 2, str(gate))  # the scan cannot finish before the interrupt lands
    proc = None
    try:
        proc = _scan_process(corpus, out, c.scheduler_address)
        _wait_for_batches(out, 2, proc)
        proc.send_signal(signal.SIGINT)
        try:  # its exit waits on no held batch: the gate stays shut until it has exited
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the scan did not exit on SIGINT: {proc.communicate()}")
    finally:
        gate.touch()
        client.run(_release_batches)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    done = store.finished_batches(out, 12)
    assert 2 <= len(done) < 12, "the interrupt came after the scan had finished"
    assert "the same command resumes the scan" in err
    assert not store.read_manifest(out).complete
    proc = _scan_process(corpus, out, c.scheduler_address)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run_now = int(re.search(r"\((\d+) run now\)", stdout).group(1))
    assert 0 < run_now <= 12 - len(done)  # a batch in flight at the interrupt may have finished since
    assert_same_content(out, reference)


def test_a_worker_killed_mid_scan_has_its_batch_rerun_and_nothing_is_lost_or_doubled(
        cluster, corpus, reference, tmp_path):
    c, client = cluster
    pids = list(client.run(os.getpid).values())
    out = tmp_path / "scan"
    proc = _scan_process(corpus, out, c.scheduler_address)
    _wait_for_batches(out, 1, proc)
    os.kill(pids[0], signal.SIGKILL)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert_same_content(out, reference)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts it for the next test


def test_resuming_into_a_scan_of_other_options_model_or_corpus_names_the_difference(
        reference, corpus, tmp_path, capsys):
    base = ["scan", "--corpus", str(corpus), "--out", str(reference), "--workers", "0"]
    assert main(base + ["--model", MODEL, "--batch", "4", "--examples", "5"]) == 2
    assert "--batch 2, not 4" in capsys.readouterr().err
    assert main(base + ["--model", "attnviz-textbook", "--batch", "2", "--examples", "5"]) == 2
    assert "model all-MiniLM-L6-v2 (sha256" in capsys.readouterr().err
    other = make_corpus(tmp_path / "other.txt", 5, seed=9)
    assert main(["scan", "--corpus", str(other), "--out", str(reference), "--workers", "0",
                 "--model", MODEL, "--batch", "2", "--examples", "5"]) == 2
    assert "not " + str(other) in capsys.readouterr().err
    # the same command again: nothing left to run, nothing written twice
    before = content(reference)
    assert main(base + ["--model", MODEL, "--batch", "2", "--examples", "5"]) == 0
    assert "(0 run now)" in capsys.readouterr().out
    assert content(reference) == before


@pytest.mark.parametrize("name, data, message", [
    ("bin.txt", b"abc\x00\x01\x02def", "looks binary (a NUL byte at offset 3)"),
    ("empty.txt", b"", "is empty"),
    ("blank.txt", b"\n  \n\n", "holds no texts (only blank lines)"),
    ("a.jsonl", b'{"body": "x"}\n{"body": "y"}\n', "no line has a 'text' field"),
    ("a.csv", b"text\nx\n", "a corpus is a .txt, .jsonl, .parquet file"),
    ("not.parquet", b"PAR1 this is not parquet", "is not a readable Parquet file"),
])
def test_a_corpus_file_that_is_no_corpus_gets_one_clear_error(tmp_path, capsys, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    rc = main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out",
               str(tmp_path / "out"), "--workers", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_parquet_corpus_without_the_column_names_its_columns(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": ["the cat sat", "a dog ran"]}), path)
    args = ["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--workers", "0"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 2
    assert "has no 'text' column (--column names another); its columns: body" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "b"), "--column", "body"]) == 0


def test_entries_that_cannot_be_run_land_in_errors_parquet_and_the_scan_goes_on(tmp_path, capsys):
    import pyarrow.parquet as pq

    path = tmp_path / "c.txt"
    long = " ".join(["the cat"] * 40)  # 80+ tokens: the textbook model has 64 positions
    path.write_bytes(b"the cat sat on the mat\n\xff\xfe broken line\nthe dog ran\n"
                     + long.encode() + b"\nthe\n")
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0", "--batch", "2"]) == 0
    assert "2 in errors.parquet" in capsys.readouterr().out
    errors = pq.read_table(out / "errors.parquet").to_pylist()
    assert [e["text_id"] for e in errors] == [1, 3]
    assert errors[0]["error"] == "line 2: not UTF-8 (byte 0xff at offset 0)"
    assert "longer than this model's 64 positions" in errors[1]["error"]
    from attnviz.corpus import store

    assert [r[0] for r in store.query(out, "SELECT DISTINCT text_id FROM heads ORDER BY 1")] == [0, 2, 4]
    # --max-tokens cuts the long text instead
    out2 = tmp_path / "scan2"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out2),
                 "--workers", "0", "--batch", "2", "--max-tokens", "16"]) == 0
    assert [r[0] for r in store.query(out2, "SELECT DISTINCT text_id, n_tokens FROM heads "
                                      "WHERE text_id = 3")] == [3]
    assert store.query(out2, "SELECT max(n_tokens) FROM heads")[0][0] == 16


def test_scan_report_counts_the_texts_the_means_are_over_not_those_that_failed(qapp, tmp_path, capsys,
                                                                              monkeypatch):
    """A line that is not UTF-8 is stored (texts table) and in errors.parquet, but gives no
    statistics: the report and its figure's title say 5 of the 6 texts, as each head's means are."""
    from attnviz.corpus import store
    from attnviz.figures import corpus as corpus_figures

    path = tmp_path / "c.txt"
    path.write_bytes(b"the cat sat on the mat\n\xff\xfe broken line\nthe dog ran\na cat ran\n"
                     b"the mat sat\nthe dog sat on the cat\n")
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0"]) == 0
    m = store.read_manifest(out)
    assert {int(n) for n in store.head_means(out, m.n_layer, m.n_head)["texts"].ravel()} == {5}
    titles = []
    real = corpus_figures.means_png
    monkeypatch.setattr(corpus_figures, "means_png",
                        lambda means, stats, title, **kw: titles.append(title) or real(means, stats, title,
                                                                                       **kw))
    capsys.readouterr()
    assert main(["scan-report", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("6 texts, complete; 5 texts scanned, 1 error"), first
    assert titles == ["attnviz-textbook: head means over 5 texts of c.txt"]


def test_scan_reports_figure_says_the_duplicate_and_induction_means_are_over_fewer_texts(
        qapp, tmp_path, monkeypatch):
    """Two of the four texts are mostly unknown words (the textbook's [UNK]): every head's duplicate
    and induction means are over the other two, and those panels' headings say so; the title and
    the other panels say all four."""
    from windows import figure_words

    from attnviz.engine.analysing.corpus_stats import HEAD_STATS
    from attnviz.figures import corpus as corpus_figures

    path = tmp_path / "c.txt"
    path.write_text("the cat sat on the mat\nqzx vbn plk wrt\nthe dog ran\nzebra xylophone quartz\n")
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0"]) == 0
    drawn = figure_words(monkeypatch, corpus_figures)  # the figure's words, as it draws them
    assert main(["scan-report", str(out)]) == 0
    assert "attnviz-textbook: head means over 4 texts of c.txt" in drawn
    headings = {t.split()[0]: t for t in drawn if t.split() and t.split()[0] in HEAD_STATS}
    assert set(headings) == set(HEAD_STATS)
    for name, heading in headings.items():
        assert heading.endswith(", over 2 texts") == (name in ("duplicate", "induction")), heading


def test_scan_reports_figure_says_no_text_gave_a_value_where_every_text_was_unknown_words(
        qapp, tmp_path, monkeypatch):
    """Every text mostly unknown words: the duplicate and induction panels say no text gave a value,
    never "over 0 texts"."""
    from windows import figure_words

    from attnviz.figures import corpus as corpus_figures

    path = tmp_path / "c.txt"
    path.write_text("qzx vbn plk wrt\nzebra xylophone quartz\n")
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0"]) == 0
    drawn = figure_words(monkeypatch, corpus_figures)
    assert main(["scan-report", str(out)]) == 0
    headings = [t for t in drawn if t.split() and t.split()[0] in ("duplicate", "induction")]
    assert len(headings) == 2 and all(", no text gave a value;" in t for t in headings), headings
    assert not any("over 0" in t for t in drawn), drawn


def test_scan_reports_footer_names_the_unknown_token_limit_the_means_use(qapp, tmp_path, capsys,
                                                                        monkeypatch):
    """The footer's share of unknown tokens is heads.UNKNOWN_LIMIT, the one the statistics use."""
    from attnviz.engine.analysing import heads

    path = tmp_path / "c.txt"
    path.write_text("the cat sat on the mat\nthe dog ran\n")
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0"]) == 0
    monkeypatch.setattr(heads, "UNKNOWN_LIMIT", 0.35)
    capsys.readouterr()
    assert main(["scan-report", str(out), "--png", str(tmp_path / "m.png")]) == 0
    footer = [line for line in capsys.readouterr().out.splitlines() if "unknown tokens" in line]
    assert len(footer) == 1 and "with more than 35% unknown tokens" in footer[0], footer


def test_jsonl_lines_that_are_not_texts_are_recorded_with_their_line(tmp_path, capsys):
    from attnviz.corpus import store

    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "the cat sat"}\nnot json\n{"text": 5}\n[1]\n{"text": "a dog ran"}\n')
    out = tmp_path / "scan"
    assert main(["scan", "--model", "attnviz-textbook", "--corpus", str(path), "--out", str(out),
                 "--workers", "0"]) == 0
    errs = store.query(out, "SELECT text_id, error FROM errors ORDER BY text_id")
    assert [e[0] for e in errs] == [1, 2, 3]
    assert errs[0][1].startswith("line 2: not JSON")
    assert errs[1][1] == "line 3: the 'text' field is int, not a string"
    assert errs[2][1] == "line 4: a JSON list, not an object with a 'text' field"


def test_paragraphs_split_at_blank_lines(tmp_path):
    from attnviz.corpus.source import read_corpus

    path = tmp_path / "p.txt"
    path.write_text("the cat\nsat on the mat\n\n \nthe dog\n\n\nran\n")
    c = read_corpus(path, split="paragraphs")
    assert c.texts == ["the cat\nsat on the mat", "the dog", "ran"]
    assert read_corpus(path).texts == ["the cat", "sat on the mat", "the dog", "ran"]


def test_scan_report_prints_each_head_and_draws_the_means(qapp, reference, tmp_path, capsys):
    from PySide6.QtGui import QImage

    png = tmp_path / "m.png"
    assert main(["scan-report", str(reference), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "all-MiniLM-L6-v2 (6 layers x 12 heads)" in lines[0] and "24 texts, complete" in lines[0]
    rows = [l for l in lines if l[:5].strip().isdigit()]
    assert len(rows) == 72
    from attnviz.corpus import store

    means = store.head_means(reference, 6, 12)
    l, h, texts, first = rows[13].split()[:4]
    assert (int(l), int(h), int(texts)) == (1, 1, 24)
    assert float(first) == pytest.approx(means["first_token_mass"][1, 1], abs=5e-4)
    img = QImage(str(png))
    assert img.width() == 1500
    colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 7)}
    assert len(colours) > 50  # heat cells, not a blank page


def test_the_command_line_and_the_window_start_without_dask_pyarrow_or_duckdb():
    code = ("import sys; import attnviz.cli, attnviz.ui.window; attnviz.cli.build_parser(); "
            "print(sorted(m for m in ('dask', 'distributed', 'pyarrow', 'duckdb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr[-2000:]


def test_a_scan_whose_process_is_killed_resumes_to_the_same_content(corpus, reference, tmp_path):
    """SIGKILL of the scan itself (its LocalCluster's scheduler lives in it): no clean-up runs, and
    the rerun still ends with every row once."""
    out = tmp_path / "scan"
    cmd = [sys.executable, "-m", "attnviz", "scan", "--model", MODEL, "--corpus", str(corpus),
           "--out", str(out), "--workers", "0", "--batch", "2", "--examples", "5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_batches(out, 1, proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300).returncode == 0
    assert_same_content(out, reference)


def test_a_full_disk_stops_the_scan_with_one_line_and_a_rerun_completes_it(
        corpus, reference, tmp_path, capsys, monkeypatch):
    import errno

    from attnviz.corpus import store

    real = store.write_parquet_atomic
    calls = []

    def fill_up(table, path):
        calls.append(path)
        if len(calls) == 9:  # in the third batch
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(table, path)

    monkeypatch.setattr(store, "write_parquet_atomic", fill_up)
    args = ["scan", "--model", MODEL, "--corpus", str(corpus), "--out", str(tmp_path / "scan"),
            "--workers", "0", "--batch", "2", "--examples", "5"]
    assert main(args) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress lines
    assert last.startswith("attnviz scan: error: ") and "No space left on device" in last, err
    assert store.finished_batches(tmp_path / "scan", 12) == {0, 1}
    monkeypatch.setattr(store, "write_parquet_atomic", real)
    assert main(args) == 0
    assert "(10 run now)" in capsys.readouterr().out
    assert_same_content(tmp_path / "scan", reference)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_scan_defaults_to_the_cores_this_process_may_use():
    """Held to one core (taskset, a container's CPU set), `attnviz scan` offers one worker per core
    it may run on, not per core of the machine."""
    code = ("import os, runpy, sys; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "sys.argv = ['attnviz', 'scan', '--help']; runpy.run_module('attnviz', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "(default: the cores, here 1)" in " ".join(out.stdout.split())
