"""Fixtures shared by engine tests: SmolLM2 packed for the one-row tests, the quantised kernels asked
for as the window asks."""

import pytest


@pytest.fixture(scope="module")
def smollm2_packed():
    """SmolLM2 loaded with its layers packed, the kernels and the one-row steps warm."""
    from gguf import GGMLQuantizationType as Q

    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.computing.load import load_model
    from attnviz.engine.reading import qpack

    qpack.ask_for_kernels()
    qm.warm([Q.Q4_1])
    try:
        yield load_model("SmolLM2-135M-Instruct")
    finally:
        qpack.ask_for_kernels(False)


@pytest.fixture
def kernels():
    """The kernels as the window asks for them (packing at load), warm."""
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.reading import qpack

    qpack.ask_for_kernels()
    qm.warm()
    yield
    qpack.ask_for_kernels(False)


@pytest.fixture
def auto_budget():
    """The memory budget auto (none chosen) before and after the test: a chosen one is global."""
    from attnviz.engine.reading import memory_budget as MB

    MB.set_memory_budget(None)
    yield
    MB.set_memory_budget(None)
