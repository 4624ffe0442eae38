"""A model file rewritten in place while the window shows its model (engine/reading/mapped_files.py):
the next text is refused with a banner naming the file and what to do, and the heatmaps keep the
last text computed, pixel for pixel. A safetensors folder, and a GGUF file (its layers on the
quantised kernels' blocks, as the window runs one)."""

import time

import pytest

from attnviz.engine.reading.byte_sizes import format_bytes
from gguf_files import CHANGED_NAMES, tiny_gqa_files
from tiny import rewrite_in_place, tiny_text_decoder
from windows import WAIT, drain_events, grid_pixel, open_window, widget


def painted(g) -> list:
    """The grid's painted colours at a 6 x 6 lattice of points of its mosaic (grid_pixel: where
    each shows on screen, whatever the grid's size then)."""
    w, h = g.img.width(), g.img.height()
    return [grid_pixel(g, (i + 0.5) * w / 6, (j + 0.5) * h / 6) for i in range(6) for j in range(6)]


def opened(kind: str, where):
    """(what the window opens, the file its weights map, a first text, a second one)."""
    if kind == "gguf":  # (no tokenizer in the file: token ids typed)
        path, _ = tiny_gqa_files("gguf", where)
        return path, path, "1, 2, 3, 4, 5, 6", "7, 8, 9, 10, 11, 12"
    folder = tiny_text_decoder(where / "tiny")
    return folder, folder / "model.safetensors", "the cat sat on the mat", "the dog sat on the rug"


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_a_model_file_rewritten_under_the_window_is_named_and_the_heatmaps_stay(qtbot, tmp_path, kind):
    source, mapped, first, second = opened(kind, tmp_path)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(source), text=first)
    w.worker.wait_idle()
    drain_events()
    shown = w.state.result
    before = painted(w.grid)
    assert len(set(before)) > 5  # (heat colours, not an empty frame)
    size = mapped.stat().st_size
    mtime = rewrite_in_place(mapped)
    with qtbot.waitSignal(w.state.sigComputeReported, timeout=WAIT,
                          check_params_cb=lambda _req, message: bool(message)):
        w.set_text(second)
    banner = widget(w, "error_banner")
    qtbot.waitUntil(banner.isVisible, timeout=WAIT)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime // 1_000_000_000))
    assert banner.text() == (
        f"Could not compute: {CHANGED_NAMES[kind]} changed on disk after attnviz opened it (its size is "
        f"the same, {format_bytes(size)}, but its modification time changed to {when}): open the "
        "model again to read the new file. The heatmaps show the last sentence that could be computed.")
    w.worker.wait_idle()
    drain_events()
    assert w.state.result is shown and w.grid.drawn is shown
    assert painted(w.grid) == before  # (the banner took some of its height: drawn smaller)


def test_a_patching_run_after_the_file_changed_says_so_in_its_panel(qtbot, tmp_path):
    """The run's checks read the prediction head, on the window's thread: refused in the panel's
    line, as a run that met the change on its job is, not as an error of attnviz's own."""
    source, mapped, first, _ = opened("safetensors", tmp_path)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(source), text=first)
    w.worker.wait_idle()
    drain_events()
    rewrite_in_place(mapped)
    panel = w.patching_panel
    panel.corrupt_box.setText("the dog sat on the mat")
    panel.run_button.click()
    drain_events()
    assert panel.note.text().startswith(
        "Patching failed. tiny/model.safetensors changed on disk after attnviz opened it (its size is the same")
    assert panel.note.text().endswith("open the model again to read the new file.")
    assert not widget(w, "error_banner").isVisible()
