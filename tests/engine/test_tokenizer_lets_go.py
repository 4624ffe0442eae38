"""Tokenising a long text on one thread lets the others run: the Rust tokenizer gives up the GIL
while it works (a job tokenising a paste of millions of characters would otherwise hold the
window's thread still), with the same tokens as the tokenizer's own encode."""

import threading
import time

TEXT = "The keys to the cabinet are on the table. "


def test_a_long_text_tokenised_on_a_thread_leaves_the_others_running(minilm):
    text = (TEXT * 50_000)[:2_000_000]
    done = []
    job = threading.Thread(target=lambda: done.append(minilm.tokenizer.encode(text)))
    longest, last = 0.0, time.perf_counter()
    job.start()
    while job.is_alive():
        time.sleep(0.002)
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    job.join()
    assert len(done[0].ids) > 400_000
    assert longest < 0.4, f"this thread stood still {longest:.2f} s while the other tokenised"


def test_the_tokens_are_the_tokenizers_own(minilm):
    text = TEXT * 20 + "naïve café 東京"
    enc = minilm.tokenizer.encode(text)
    raw = minilm.tokenizer.raw.encode(text)
    assert enc.ids == raw.ids and enc.tokens == raw.tokens and enc.offsets == [tuple(o) for o in raw.offsets]
