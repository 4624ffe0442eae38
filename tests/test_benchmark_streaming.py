"""benchmarks/streaming.py: the memory floor's plain read covers every byte of the arrays it is given."""

import numpy as np
import pytest

from benchmarks import streaming


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 4099])
def test_words_and_rest_are_every_byte_in_order(n):
    a = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    words, rest = streaming._words(a)
    assert words.dtype == np.uint64 and words.size == n // 8 and rest.size == n % 8
    assert np.concatenate([words.view(np.uint8), rest]).tobytes() == a.tobytes()


def test_the_reads_combine_every_byte():
    a = np.random.default_rng(1).integers(0, 256, 1000, dtype=np.uint8)
    words, rest = streaming._words(a)
    expected = np.bitwise_xor.reduce(words.view(np.uint64)) if words.size else 0
    assert streaming._read64(words) == expected
    assert streaming._read8(rest) == np.bitwise_xor.reduce(rest)


def test_read_ms_counts_the_bytes_of_arrays_of_any_type():
    arrays = [np.ones((3, 5), np.float16), np.zeros(13, np.uint8), np.ones((2, 2), np.float32)]
    ms, nbytes = streaming.read_ms(arrays, repeat=2)
    assert nbytes == 30 + 13 + 16
    assert 0 < ms < float("inf")
