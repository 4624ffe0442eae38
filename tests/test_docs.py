"""The README and the guide in docs/: every link and image exists, every command line parses and
runs as pasted, every Python example runs, every window picture is remade by scripts/screenshot.py,
the pages hold no dated text, and the sizes they give in prose read as the app writes them."""

import json
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.registry import smollm2_file

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUIDE = [p for p in PAGES if p.name != "benchmarks.md"]  # benchmarks.md: the report's dated table
ATTNVIZ = ".venv/bin/attnviz"
# command lines that are checked to parse but not run here: each takes tens of seconds on 2 cores
# (the test suite has their own tests)
SLOW = {
    ("ablation-scan", "SmolLM2-135M-Instruct"): "zero-ablates 270 heads",
    ("scan", "all-MiniLM-L6-v2"): "starts a Dask cluster and scans a corpus",
    ("scan-report", None): "reads the scan the line before makes",
    ("patch", None): "re-runs SmolLM2 hundreds of times",
    ("compare", "SmolLM2-135M-Instruct"): "quantizes SmolLM2 in memory and runs both",
    ("compare", None): "quantizes SmolLM2 in memory and runs both",
    ("quantize", "SmolLM2-135M-Instruct"): "writes a GGUF file of SmolLM2",
    ("quantize", "smollm2.Q8_0.gguf"): "reads the file the line before writes",
    ("circuits", "SmolLM2-135M-Instruct"): "scores 270 heads against 270",
}
# a link's or picture's text may hold brackets ("x [46, 576]"), one level deep, as Markdown allows
TEXT = r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
LINK = re.compile(r"!?" + TEXT + r"\(([^)\s]+)\)")
PICTURE = re.compile(r"!" + TEXT + r"\(([^)\s]+)\)")
# pictures not of the window, and what makes them
OTHER_PICTURES = {"toy_training.png": "scripts/plot_toy.py", "quantize.png": "scripts/plot_quantize.py",
                  "patching.png": "scripts/plot_patching.py"}


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _blocks(text: str, langs: tuple[str, ...]) -> list[str]:
    return [body for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S) if lang in langs]


def _prose(text: str) -> str:
    """The page without its code blocks and inline code (links there are examples, not links)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def command_lines(page: Path) -> list[str]:
    """What a reader pastes: the lines of ```bash blocks, and inline `.venv/bin/attnviz COMMAND ...`
    or `.venv/bin/python scripts/...` spans (the README's command table)."""
    text = _text(page)
    blocks = [block.replace("\\\n", " ") for block in _blocks(text, ("bash", "sh"))]  # continuations
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    for span in re.findall(r"`([^`\n]+)`", _prose_blocks_removed(text)):
        words = span.split()
        if words[0] == ATTNVIZ and len(words) > 1 and not words[1].startswith("-"):
            lines.append(span)
        elif words[0] == ".venv/bin/python" and len(words) > 1 and words[1].startswith("scripts/"):
            lines.append(span)
    return lines


def _prose_blocks_removed(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _slow(argv: list[str]) -> str | None:
    model = argv[argv.index("--model") + 1] if "--model" in argv else None
    return SLOW.get((argv[0], model))


def _headings(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings."""
    out = set()
    for title in re.findall(r"^#+ +(.+?) *$", _prose_blocks_removed(_text(page)), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").strip().lower())
        out.add(slug.replace(" ", "-"))
    return out


def test_every_link_and_image_in_the_readme_and_the_guide_exists():
    missing = []
    for page in PAGES:
        for target in LINK.findall(_prose(_text(page))):
            if re.match(r"(https?|mailto):", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.is_file():
                missing.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _headings(dest):
                missing.append(f"{page.name}: {target} (no such heading)")
    assert missing == []


def test_every_page_of_the_guide_is_linked_from_its_index_and_shows_the_window():
    index = _text(ROOT / "docs" / "index.md")
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"]({page.name})" in index, f"docs/index.md does not link {page.name}"
    for page in GUIDE:
        if page.name not in ("index.md", "architecture.md"):
            assert PICTURE.search(_text(page)), f"{page.name} has no picture"


def test_every_window_picture_is_made_by_the_screenshot_script():
    """`scripts/screenshot.py --all` remakes every picture of the window the pages show."""
    shots = runpy.run_path(str(ROOT / "scripts" / "screenshot.py"), run_name="shots")["SHOTS"]
    shown = {Path(t).name for page in PAGES
             for t in PICTURE.findall(_prose(_text(page)))}
    assert shown - set(OTHER_PICTURES) <= set(shots), shown - set(OTHER_PICTURES) - set(shots)
    for name, script in OTHER_PICTURES.items():
        assert runpy.run_path(str(ROOT / script), run_name="shots")["OUT"] == ROOT / "docs" / name
    assert all((ROOT / "docs" / name).is_file() for name in shots)


def test_the_readme_is_short_and_no_page_holds_dated_text():
    readme = _text(ROOT / "README.md")
    assert len(readme.splitlines()) <= 250
    outside = re.sub(r"<!-- benchmarks:begin.*?<!-- benchmarks:end -->", "", readme, flags=re.S)
    for page, text in [(ROOT / "README.md", outside), *[(p, _text(p)) for p in GUIDE[1:]]]:
        dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
        assert dates == [], f"{page.name}: {dates}"


def test_every_command_line_parses_as_pasted():
    from attnviz.cli import build_parser

    parser = build_parser()
    n = 0
    for page in PAGES:
        for line in command_lines(page):
            argv = shlex.split(line, comments=True)
            assert not any(a.startswith("[") or a in ("...", "…") or "path/to" in a for a in argv), line
            if argv[0] == ATTNVIZ:
                try:
                    parser.parse_args(argv[1:])
                except SystemExit:
                    pytest.fail(f"{page.name}: the line does not parse: {line}")
                n += 1
            else:  # set-up and scripts: `bash scripts/run-app.sh`, `.venv/bin/python scripts/...`
                assert argv[0] in ("bash", ".venv/bin/python"), f"{page.name}: {line}"
                assert (ROOT / argv[1]).is_file(), f"{page.name}: {line}"
    assert n >= 30


@pytest.fixture
def each_gguf_loaded_once(monkeypatch):
    """The commands' GGUF models (SmolLM2) read from their file once for all the lines that ask for
    them alike (same file, options, memory budget and kernels), each line getting it with an empty
    KV cache; the memory budget a line's --memory-budget chose is put back afterwards."""
    from attnviz.engine.computing import load
    from attnviz.engine.reading import qpack
    from attnviz.engine.reading.memory_budget import chosen_budget, chosen_by_command_line, set_memory_budget

    real, loaded = load.load_gguf, {}

    def load_gguf(path, name=None, license=None, budget=None, eager=True, text=None):
        # (`text`, a one-shot command's: left out, so the model kept serves every command's text)
        key = (str(path), name, license, budget, eager, qpack.kernels_on(), chosen_budget())
        if key not in loaded:
            loaded[key] = real(path, name=name, license=license, budget=budget, eager=eager)
        loaded[key].clear_cache()
        return loaded[key]

    monkeypatch.setattr(load, "load_gguf", load_gguf)
    was = chosen_budget(), chosen_by_command_line()
    yield
    set_memory_budget(*was)


def test_every_command_line_runs_as_pasted(tmp_path, monkeypatch, capsys, qapp, each_gguf_loaded_once):
    """Each page's lines in order in one folder, a page's corpus made first (as its reader does);
    the lines in SLOW only parse (above). The session's QApplication exists first (qapp): an export
    would otherwise make a bare QGuiApplication that the window tests after it cannot use."""
    from attnviz.cli import main

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    ran, once = 0, RunOnce()
    for page in PAGES:
        folder = tmp_path / page.stem
        folder.mkdir()
        monkeypatch.chdir(folder)
        lines = [shlex.split(line, comments=True) for line in command_lines(page)]
        for argv in [a for a in lines if a[:2] == [".venv/bin/python", "scripts/stdlib_corpus.py"]]:
            once(argv, folder, lambda a=argv: subprocess.run([sys.executable, str(ROOT / a[1]), *a[2:]], check=True))
        for argv in lines:
            if argv[0] != ATTNVIZ or _slow(argv[1:]):
                continue
            def run(argv=argv):
                assert main(argv[1:]) == 0, (page.name, argv, capsys.readouterr().err)
            ran += once(argv, folder, run)
    assert ran >= 25


class RunOnce:
    """Runs each command line once: a line pasted on two pages (the README's table repeats the
    guide's) is the same command with the same arguments; where none of them names a file of its
    page's folder, the files its first run made are copied into that folder instead of running it
    again. A call -> whether the line ran."""

    def __init__(self):
        self.made: dict[tuple, list[Path]] = {}  # line -> the files its run made

    def __call__(self, argv: list[str], folder: Path, run) -> bool:
        import shutil

        key = tuple(argv)
        if key in self.made and not any((folder / a).exists() for a in argv):
            for path in self.made[key]:
                shutil.copy2(path, folder / path.name)
            return False
        before = set(folder.iterdir())
        run()
        self.made[key] = [p for p in set(folder.iterdir()) - before if p.is_file()]
        return True


def test_every_python_example_runs():
    for page in PAGES:
        for block in _blocks(_text(page), ("python",)):
            exec(compile(block, f"{page.name} example", "exec"), {})


def test_every_picture_in_docs_is_shown_on_some_page():
    """A picture no page shows is stale weight in the repository (or a page lost its reference)."""
    shown = {Path(t).name for page in PAGES
             for t in PICTURE.findall(_prose(_text(page)))}
    pictures = {p.name for p in (ROOT / "docs").glob("*.png")}
    assert pictures - shown == set()


# files the pages name that are not in this repository
ELSEWHERE = {"convert_hf_to_gguf.py"}  # llama.cpp's converter


def test_every_file_a_page_names_exists():
    """`scripts/plot_toy.py`, `safetensors_model.py`, `ui/machinery/*_jobs.py`, in prose or in a
    command: each names a file of the repository (by its path, or its name in some folder), so a
    renamed or removed file shows here."""
    from fnmatch import fnmatch

    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
             if ".venv" not in p.parts and ".git" not in p.parts]
    missing = []
    for page in PAGES:
        for name in set(re.findall(r"[\w./*-]*\w\.py\b", _text(page))) - ELSEWHERE:
            if not any(fnmatch(f, name) or fnmatch(f, "*/" + name) for f in files):
                missing.append(f"{page.name}: {name}")
    assert missing == []


def test_the_counts_the_pages_give_are_the_repositorys():
    """The calculator's presets and the toy model's checkpoints, counted where the pages say them."""
    import json

    presets = len(json.loads((ROOT / "resources" / "presets.json").read_text())["presets"])
    toy = ROOT / "resources" / "toy-stdlib-gpt2" / "checkpoints.json"
    checkpoints = len(json.loads(toy.read_text())["checkpoints"])
    for page in PAGES:
        text = _prose(_text(page))
        for n in re.findall(r"(\d+) (?:presets|real models' presets)", text):
            assert int(n) == presets, f"{page.name}: {n} presets, resources/presets.json has {presets}"
        for n in re.findall(r"(\d+) (?:training )?checkpoints", text):
            assert int(n) == checkpoints, f"{page.name}: {n} checkpoints, the toy model has {checkpoints}"


def test_the_window_page_names_every_side_panel_and_shortcut():
    """docs/window.md names each dock the window can show by its title, and its Keys table each
    menu shortcut."""
    from attnviz.ui.panel_docks import DOCKS, ON_SHOW

    page = _text(ROOT / "docs" / "window.md")
    titles = ["Focus head"] + [title for docks in (*DOCKS.values(), *ON_SHOW.values())
                               for title, _name in docks]
    assert [t for t in titles if t not in page] == []
    menus = (ROOT / "attnviz" / "ui" / "menus.py").read_text(encoding="utf-8")
    keys = re.findall(r'QKeySequence\("([^"]+)"\)', menus)
    assert len(keys) >= 8
    table = page.split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]
    assert [k for k in keys if k not in table] == []


# ---- sizes in prose, as the app writes them (engine/reading/byte_sizes.format_bytes), worked out
# from what the app measures: SmolLM2's layers packed and as float32, one layer, its file; Gemma 3
# 270M's unembedding as float32; the toy model's files

def _flat(name: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / name).read_text())


def test_smollm2s_float32_layers_read_as_its_memory_line_writes_them(smollm2):
    sizes = smollm2.weights.layers.sizes
    total, one = format_bytes(sum(sizes)), format_bytes(max(sizes))
    assert f"{total} float32" in smollm2.memory  # the figure the window's memory line shows
    models = _flat("docs/models.md")
    assert f"(SmolLM2: {one}, where all {len(sizes)} take {total})" in models
    assert f"so, {total} as float32." in models


def test_smollm2s_packed_layers_read_as_its_memory_line_writes_them():
    pytest.importorskip("numba")
    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack

    asked = qpack.kernels_on()
    qpack.ask_for_kernels()
    try:
        model = load_gguf(smollm2_file())
    finally:
        qpack.ask_for_kernels(asked)
    packed = format_bytes(model.weights.layers.view_bytes())
    assert f"held in their file's blocks ({packed})" in model.memory
    assert f"SmolLM2's layers take {packed} so, " in _flat("docs/models.md")


def test_file_sizes_and_gemma3s_unembedding_read_as_the_app_writes_sizes():
    assert f"one {format_bytes(smollm2_file().stat().st_size)} Q4_1 GGUF" in _flat("README.md")
    presets = json.loads((ROOT / "resources" / "presets.json").read_text())["presets"]
    gemma = next(p for p in presets if p["id"] == "gemma-3-270m")
    unembedding = gemma["vocab_size"] * gemma["d_model"] * 4  # float32
    assert f"Gemma 3 270M's {format_bytes(unembedding)} float32 copy" in _flat("docs/models.md")
    toy = ROOT / "resources" / "toy-stdlib-gpt2"
    each = {p.stat().st_size for p in toy.rglob("*.safetensors")}
    assert len(each) == 1  # (every checkpoint the same size)
    whole = sum(p.stat().st_size for p in toy.rglob("*") if p.is_file())
    assert f"Stored as F16: {format_bytes(each.pop())} a checkpoint, {format_bytes(whole)} in all." in \
        _flat("docs/toy_model.md")


def test_the_changed_file_example_reads_as_the_app_writes_it():
    from attnviz.engine.reading.mapped_files import changed_message

    smollm2 = smollm2_file()  # (its real size, cut to 12 MiB)
    said = changed_message(smollm2.name, smollm2.stat().st_size, 12 * 2 ** 20, 0)
    assert f"e.g. {said}. The window" in _flat("docs/models.md").replace("`", "")


def test_the_patching_pages_induction_bars_read_as_the_head_scores_give_them(smollm2):
    """docs/patching.md's made-up-names finding: L23 H2 clears the induction strength threshold and
    misses the score-over-chance test, L23 H7 misses both; the numbers as `attnviz heads` gives them."""
    from attnviz.engine.analysing import heads as H

    text = "Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax"
    hs = H.score_result(smollm2.run(text), unknown_ids=H.unknown_token_ids(smollm2))
    bar, margin = H.THRESHOLDS["induction"], H.CHANCE_MARGIN
    s, c, ch = (hs.strength["induction"], hs.scores["induction"], hs.chance["induction"])
    assert s[23, 2] > bar and c[23, 2] < ch[23, 2] + margin  # over one bar, under the other
    assert s[23, 7] < bar and c[23, 7] < ch[23, 7] + margin  # under both
    page = _flat("docs/patching.md")
    assert (f"L23 H2's induction strength, {s[23, 2]:.2f}, is over the {bar:g} threshold, but its "
            f"induction score, {c[23, 2]:.3f}, is under its chance score {ch[23, 2]:.3f} plus the {margin:g} "
            f"margin, {ch[23, 2] + margin:.3f}; L23 H7 misses both bars (strength {s[23, 7]:.2f}, score "
            f"{c[23, 7]:.3f})") in page


def test_the_toy_is_stored_in_float16_as_compare_md_says_and_f16_changes_nothing(capsys):
    """docs/compare.md names the toy's storage type as its file holds it (every tensor F16), and the
    consequence it states: the toy quantized to F16 is itself bit for bit."""
    from attnviz.cli import main

    toy = ROOT / "resources" / "toy-stdlib-gpt2"
    raw = (toy / "model.safetensors").read_bytes()
    head = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert {t["dtype"] for name, t in head.items() if name != "__metadata__"} == {"F16"}
    assert json.loads((toy / "config.json").read_text())["torch_dtype"] == "float16"
    page = _flat("docs/compare.md")
    assert "The toy decoder (stored in float16, 2 layers" in page and "toy decoder (float32" not in page
    assert "`--quantize F16` of the toy changes nothing" in page
    assert main(["compare", "--model", "attnviz-toy-stdlib", "--quantize", "F16", "--probe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {v for row in doc["heads_jsd"] for v in row} == {0.0} and set(doc["kld"]) == {0.0}
    assert set(doc["resid_cos"]) == {1.0} and doc["same_top1"] == 1.0
