"""Which model one side of a comparison was: its name, its files and their sha256, the type it was
quantized to in memory, its training checkpoint (the command line's JSON `a` and `b`, and what a
window's export sidecar restores)."""

from __future__ import annotations

_SHA: dict = {}  # (path, size, mtime_ns) -> sha256 hex: a window's repeated exports hash once


def file_sha256(path) -> str:
    """The file's sha256 (hex), read in 1 MiB blocks; kept per path, size and modification time."""
    import hashlib
    from pathlib import Path

    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _SHA[key] = h.hexdigest()
    return _SHA[key]


def model_files(model) -> list:
    """The files a model's weights were read from: its GGUF file, or its folder's .safetensors."""
    from pathlib import Path

    path = getattr(model, "path", None)
    if path is None:
        return []
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted(path.glob("*.safetensors")) if path.is_dir() else []


def identity(model, name: str | None = None, quantized: str | None = None, checkpoint=None) -> dict:
    """{name, path, files: [{file, sha256}], quantized, checkpoint}: which model one side was.
    `quantized`: the type a model was quantized to in memory (its files are the source's)."""
    return {"name": name or model.name, "path": None if model.path is None else str(model.path),
            "files": [{"file": str(p), "sha256": file_sha256(p)} for p in model_files(model)],
            "quantized": quantized, "checkpoint": checkpoint}
