"""Help > About names where the model was read from as it is: the file of a GGUF model ("File:"),
the folder of a safetensors one ("Folder:"); a GGUF file was called a folder."""

import html

from attnviz.ui.menus import about_html


def test_about_says_file_for_a_gguf_and_folder_for_a_folder(smollm2, window):
    gguf = about_html(smollm2)
    assert smollm2.path.is_file()
    assert f"File: {html.escape(str(smollm2.path))}" in gguf and "Folder:" not in gguf
    folder = window.state.model  # MiniLM: a folder with config.json and safetensors
    assert folder.path.is_dir()
    assert f"Folder: {html.escape(str(folder.path))}" in about_html(folder)
