"""Where other tools keep GGUF files, and the files found there: llama.cpp's download cache, LM
Studio's folders, Ollama's stores (whose manifests name the model blobs), and the .gguf files
under a folder (a split model by its first part). Nothing is opened but folders and manifests."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from pathlib import Path

log = logging.getLogger(__name__)

OLLAMA_SYSTEM_DIR = Path("/usr/share/ollama/.ollama/models")  # Linux installs run as user `ollama`
_SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)  # llama.cpp's gguf-split


def llama_cpp_cache() -> Path:
    """llama.cpp's -hf download folder (common/common.cpp fs_get_cache_directory)."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"]).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "llama.cpp"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "llama.cpp"


def lm_studio_dirs() -> list[Path]:
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def ollama_dirs() -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    dirs = [Path(env).expanduser() if env else Path.home() / ".ollama" / "models"]
    if os.access(OLLAMA_SYSTEM_DIR, os.R_OK | os.X_OK):
        dirs.append(OLLAMA_SYSTEM_DIR)
    return dirs


def gguf_files(root: Path) -> list[Path]:
    """The .gguf files under root, sorted; of a split model only its first part."""
    found = []
    for folder, dirs, files in os.walk(root):  # unreadable folders are passed over
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if not f.lower().endswith(".gguf"):
                continue
            part = _SPLIT_PART.search(f)
            if part and int(part[1]) != 1:
                continue
            found.append(Path(folder) / f)
    return found


_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")


def _ollama_name(manifests: Path, manifest: Path) -> str | None:
    """manifests/<registry>/<namespace>/<model>/<tag> -> ollama:<model>:<tag> as `ollama list`
    writes it (the default registry and the `library` namespace left out)."""
    parts = manifest.relative_to(manifests).parts
    if len(parts) != 4:
        return None
    registry, namespace, model, tag = parts
    name = f"{model}:{tag}"
    if namespace != "library" or registry != "registry.ollama.ai":
        name = f"{namespace}/{name}"
    if registry != "registry.ollama.ai":
        name = f"{registry}/{name}"
    return "ollama:" + name


def ollama_models(store: Path) -> list[tuple[list[str], Path]]:
    """([names], model blob) for each model in an Ollama store; tags of one blob are grouped."""
    manifests, blobs = store / "manifests", store / "blobs"
    by_blob: dict[Path, list[str]] = {}
    for folder, dirs, files in os.walk(manifests):
        dirs.sort()
        for f in sorted(files):
            manifest = Path(folder) / f
            name = _ollama_name(manifests, manifest)
            if name is None:
                continue
            try:
                if manifest.stat().st_size > 1 << 20:
                    raise ValueError("larger than 1 MiB")
                layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers") or []
                digest = next(layer["digest"] for layer in layers
                              if layer.get("mediaType") == _OLLAMA_MODEL_LAYER)
            except StopIteration:
                log.info("skipping Ollama manifest %s: no model layer", manifest)
                continue
            except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
                log.warning("skipping Ollama manifest %s: %s", manifest, exc)
                continue
            match = _DIGEST.fullmatch(str(digest))
            if match is None:
                log.warning("skipping Ollama manifest %s: model digest %r", manifest, digest)
                continue
            blob = blobs / f"sha256-{match[1]}"
            if blob.is_file():
                by_blob.setdefault(blob, []).append(name)
            else:
                log.info("skipping %s: its blob %s is missing", name, blob.name)
    # a tag other than `latest` names the model best, and the default registry's name;
    # `ollama:x` means `ollama:x:latest`
    out = []
    for blob, names in by_blob.items():
        names.sort(key=lambda n: (n.endswith(":latest"), n.count("/"), n))
        short = [n[:-len(":latest")] for n in names if n.endswith(":latest")]
        out.append((names + short, blob))
    return out


def ollama_blob_name(path: Path) -> str | None:
    """The Ollama name of a blob given by path, from the manifests beside its blobs folder."""
    if path.parent.name != "blobs" or not (path.parent.parent / "manifests").is_dir():
        return None
    for names, blob in ollama_models(path.parent.parent):
        if blob.name == path.name:
            return names[0]
    return None
