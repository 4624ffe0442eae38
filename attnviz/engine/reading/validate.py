"""One validation layer for what attnviz reads from disk: files, JSON, config fields, tokenizer ids
and weights. Every failure is one ModelLoadError that names the file, the field, the value found and
what was expected; nothing is left to fail later, at the first run.

Files are checked before they are opened: a FIFO, device or socket is refused by its kind (reading a
FIFO blocks until something writes to it, which may be never).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.hf_config import pick

log = logging.getLogger(__name__)

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


# ---- files --------------------------------------------------------------------------------------

def os_reason(exc: OSError) -> str:
    """What an OSError means, in words ("permission denied", not "[Errno 13] ..."), as the app's
    sentences write it after a colon: "cannot read x: permission denied", "cannot write y: ..."."""
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "it is a folder, not a file"
    if exc.strerror:  # (the system's words, "No space left on device", after a colon)
        return exc.strerror[0].lower() + exc.strerror[1:]
    return str(exc) or type(exc).__name__  # (a message may hold a path: its case is kept)


def cannot_read(path: Path, exc: OSError) -> ModelLoadError:
    return ModelLoadError(f"cannot read {path}: {os_reason(exc)}")


def _stat(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise cannot_read(path, exc) from exc


def _kind(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def file_kind(path: Path) -> str | None:
    """None for a regular file (a symlink to one counts), else what it is ("a FIFO (named pipe)");
    raises ModelLoadError when the path cannot be looked at. Never opens the file."""
    return _kind(_stat(path).st_mode)


def _refuse_kind(path: Path, st: os.stat_result) -> None:
    kind = _kind(st.st_mode)
    if kind is not None:
        raise ModelLoadError(f"{path} is {kind}, not a regular file: attnviz reads only regular files")


def regular_file(path: Path) -> Path:
    """`path`, if it is a regular file; refused by its kind otherwise, before anything opens it."""
    path = Path(path)
    _refuse_kind(path, _stat(path))
    return path


def exists(path: Path) -> bool:
    """True when something (of any kind, even a dangling link) is at `path`."""
    return os.path.lexists(path)


MAX_JSON_BYTES = 16 << 20  # config.json, a shard index: a few kB; anything this big is not one
MAX_TOKENIZER_BYTES = 512 << 20  # tokenizer.json: up to ~35 MB in real models (Gemma)


def read_text(path: Path, max_bytes: int = MAX_JSON_BYTES) -> str:
    """A regular file's UTF-8 text, with every failure named; a file over max_bytes is refused
    unread (a multi-gigabyte file named config.json would otherwise be read whole)."""
    path = Path(path)
    st = _stat(path)
    _refuse_kind(path, st)
    if st.st_size > max_bytes:
        raise ModelLoadError(f"{path} is {st.st_size:,} bytes, expected at most {max_bytes:,} for "
                             f"a {path.name}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelLoadError(f"{path} is not UTF-8 text (byte {exc.start:,} cannot be decoded)") from exc
    except OSError as exc:
        raise cannot_read(path, exc) from exc


def parse_json_object(text: str, path: Path) -> dict:
    """JSON text that must hold an object (a dict)."""
    if not text.strip():
        raise ModelLoadError(f"{path} is empty, expected a JSON object {{...}}")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except RecursionError:
        raise ModelLoadError(f"{path} is not valid JSON: it is nested too deeply") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path} holds {json_kind(value)}, expected a JSON object {{...}}")
    return value


def read_json_object(path: Path) -> dict:
    return parse_json_object(read_text(path), Path(path))


# ---- values -------------------------------------------------------------------------------------

def json_kind(value: Any) -> str:
    """How a JSON value reads in a message: 'a string', 'a list', 'null'..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, np.integer)):
        return "a whole number"
    if isinstance(value, (float, np.floating)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def show(value: Any, limit: int = 60) -> str:
    """A value as a message shows it: its repr, cut to `limit` characters."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return {None: "null", True: "true", False: "false"}[None if value is None else bool(value)]
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def refusal(source: Any, key: str, found: str | None, expected: str) -> ModelLoadError:
    """One sentence for a value `source` gives `key` (`found` as the message shows it; None: the
    key is not there at all) where `expected` must be."""
    if found is None:
        return ModelLoadError(f"{source} does not set {key}, which must be {expected}")
    return ModelLoadError(f"{source} sets {key} to {found}, but it must be {expected}")


# The words the project's error messages start a sentence with (a test keeps the list whole). An
# error whose first word is one of them gets a capital; any other first word is kept as it is
# spelt: a message may start with a model, folder, file or key name ("tiny has no training
# checkpoints"), and a name keeps its case.
SENTENCE_STARTS = frozenset("""
    a ablation an attention batch calculator cannot checkpoint circuits corpus direction expected
    edge export give head heads index key knocking knockout larger layer layers lens loss memory model
    must newer no nothing only patching permission position preset region rendering resuming role
    rounding
    rows scale scope sequence stopped target temperature tensor text the there this token too
    unexpected unknown view what width""".split())


def sentences(lead: str, why: str) -> str:
    """What could not be done and why, as two sentences ("Could not load model B. For B, a memory
    budget ..."), never "lead: why", which would chain a second colon to any in the error. The
    error keeps its words; it gets a capital only where its first word is one of the plain words
    the project's messages start with (SENTENCE_STARTS), never where it starts with a name. The
    window's failure lines (runner.failure) too."""
    why = str(why).strip()
    first = why.split(maxsplit=1)[0].rstrip(",:;…") if why else ""  # ("text.json" is a name)
    if first in SENTENCE_STARTS:
        why = why[0].upper() + why[1:]
    return " ".join(full_stop(part) for part in (lead, why) if part)


def full_stop(text: str) -> str:
    """`text` ending as a sentence: a period added where it does not already end in one, '?', '!'
    or '…'; nothing is taken off (a final '.' may be a path, "attnviz --model .", or a folder
    "runs."). The window's one-sentence messages (ui/views/notices.sentence) too."""
    text = str(text).rstrip()
    return text if text.endswith((".", "?", "!", "…")) else text + "."


def is_whole(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


class Fields:
    """Typed reads of one JSON object (a config.json, or GGUF metadata mapped to config names).

    Each read names `source` and the field in its error; `names` maps a field to the name the file
    itself uses (a GGUF key such as `llama.block_count`)."""

    MISSING = object()

    def __init__(self, raw: dict, source: str, names: dict[str, str] | None = None):
        self.raw, self.source, self.names = raw, source, names or {}

    def name(self, key: str) -> str:
        return self.names.get(key, key)

    def error(self, key: str, expected: str, value: Any = MISSING) -> ModelLoadError:
        if value is Fields.MISSING:
            value = self.raw.get(key, Fields.MISSING)
        found = None if value is Fields.MISSING else show(value)
        return refusal(self.source, self.name(key), found, expected)

    def pick(self, *keys: str) -> tuple[str, Any]:
        """(the first of `keys` that is set and not null, its value); (keys[0], None) if none is."""
        return pick(self.raw, keys)

    def whole(self, *keys: str, low: int = 1, high: int, what: str, default: Any = MISSING) -> Any:
        """A whole number in low..high (`what` says what it counts, for the message); `default`
        (returned as it is) when the field is absent or null, an error if there is no default."""
        key, value = self.pick(*keys)
        expected = f"a whole number ({what}) in {low}..{high:,}"
        if value is None:
            if default is Fields.MISSING:
                raise self.error(key, expected, Fields.MISSING)
            return default
        if not is_whole(value) or not low <= value <= high:
            raise self.error(key, expected, value)
        return int(value)

    def positive(self, *keys: str, default: float) -> float:
        """A positive finite number (an epsilon, a RoPE base)."""
        key, value = self.pick(*keys)
        return self.positive_value(key, value, default)

    def positive_value(self, key: str, value: Any, default: float) -> float:
        if value is None:
            return float(default)
        if not is_number(value) or not (math.isfinite(value) and value > 0):
            raise self.error(key, "a positive finite number", value)
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, (bool, np.bool_)):
            raise self.error(key, "true or false", value)
        return bool(value)

    def choice(self, *keys: str, choices, default: str) -> str:
        key, value = self.pick(*keys)
        if value is None:
            return default
        if not isinstance(value, str) or value not in choices:
            raise self.error(key, "one of " + ", ".join(sorted(choices)), value)
        return value

    def obj(self, key: str) -> dict:
        """An object, or {} when the field is absent or null."""
        value = self.raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(key, "an object {...}", value)
        return value


# ---- tokenizer.json -----------------------------------------------------------------------------

def tokenizer_ids(spec: dict, path: Path) -> list[tuple[str, str, int]]:
    """Every id a tokenizer.json can produce, as (field, token, id), type-checked: the model's
    vocabulary, the added tokens and the post-processor's special tokens."""
    model = spec.get("model")
    if not isinstance(model, dict):
        raise refusal(path, "model", show(model), "an object with a vocab")
    vocab = model.get("vocab")
    out: list[tuple[str, str, int]] = []
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        ids = vocab.values()
        if ids and (not set(map(type, ids)) <= {int} or min(ids) < 0):  # C loops, no Python per id
            token, i = next((t, i) for t, i in vocab.items() if not is_whole(i) or i < 0)
            raise refusal(path, f"model.vocab[{show(token)}]", show(i), "a token id (a whole number >= 0)")
        if vocab:
            token = max(vocab, key=vocab.get)
            out.append(("model.vocab", token, vocab[token]))
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
        if vocab:
            out.append(("model.vocab", str(vocab[-1][0] if isinstance(vocab[-1], list) and vocab[-1]
                                           else vocab[-1]), len(vocab) - 1))
    elif vocab is not None:
        raise refusal(path, "model.vocab", json_kind(vocab), "an object of token -> id (or a list for "
                      "a Unigram model)")
    added = spec.get("added_tokens")
    added = [] if added is None else added
    if not isinstance(added, list):
        raise refusal(path, "added_tokens", json_kind(added), "a list")
    for n, entry in enumerate(added):
        i = entry.get("id") if isinstance(entry, dict) else None
        if not is_whole(i) or i < 0:
            raise refusal(path, f"added_tokens[{n}].id", show(i), "a token id (a whole number >= 0)")
        out.append((f"added_tokens[{n}]", str(entry.get("content")), int(i)))
    out.extend(_post_processor_ids(spec.get("post_processor"), "post_processor", path))
    return out


def _post_processor_ids(node: Any, where: str, path: Path) -> list[tuple[str, str, int]]:
    """The ids a post-processor inserts: TemplateProcessing's special_tokens.*.ids, Bert/Roberta's
    cls and sep pairs, and those of a Sequence's processors."""
    if not isinstance(node, dict):
        return []
    out = []
    specials = node.get("special_tokens")
    specials = {} if specials is None else specials
    if not isinstance(specials, dict):
        raise refusal(path, f"{where}.special_tokens", json_kind(specials), "an object")
    for name, special in specials.items():
        ids = special.get("ids") if isinstance(special, dict) else None
        field = f"{where}.special_tokens[{show(name)}].ids"
        if not isinstance(ids, list) or not all(is_whole(i) and i >= 0 for i in ids):
            raise refusal(path, field, show(ids), "a list of token ids")
        out.extend((field, str(name), int(i)) for i in ids)
    for key in ("cls", "sep"):
        pair = node.get(key)
        if pair is None:
            continue
        if not (isinstance(pair, list) and len(pair) == 2 and is_whole(pair[1]) and pair[1] >= 0):
            raise refusal(path, f"{where}.{key}", show(pair), "[token, id]")
        out.append((f"{where}.{key}", str(pair[0]), int(pair[1])))
    subs = node.get("processors")
    subs = [] if subs is None else subs
    if not isinstance(subs, list):
        raise refusal(path, f"{where}.processors", json_kind(subs), "a list")
    for n, sub in enumerate(subs):
        out.extend(_post_processor_ids(sub, f"{where}.processors[{n}]", path))
    return out


def check_token_ids(ids: list[tuple[str, str, int]], n_rows: int, path: Path, rows_from: str) -> None:
    """Every id a tokenizer can produce must pick a row of the embedding (n_rows = vocab_size)."""
    if not ids:
        return
    field, token, top = max(ids, key=lambda t: t[2])
    if top >= n_rows:
        raise ModelLoadError(
            f"{path} gives token {show(token)} the id {top:,} ({field}), but the model's embedding has "
            f"{n_rows:,} rows ({rows_from}), so ids must be in 0..{n_rows - 1:,}")


# ---- weights ------------------------------------------------------------------------------------

SCAN_CHUNK = 1 << 22  # elements per isfinite pass: a 4 MiB bool mask at most


def check_shape(name: str, got: tuple[int, ...], want: tuple[int, ...], implied_by: str,
                held_in: str, fix: str) -> None:
    """Tensor `name`, held in file `held_in`, must have the shape the model's description implies
    (`implied_by`: a config.json's path, "the file's metadata"); `fix` says what to do."""
    if tuple(got) != tuple(want):
        raise ModelLoadError(f"tensor {name} in {held_in} has shape {list(got)}, but {implied_by} "
                             f"implies {list(want)}: {fix}")


def check_vocab_rows(rows: int, vocab_size: int, claim: str, table: str, fix: str) -> None:
    """The token embedding (`table`: "the token embedding x in y") must have one row per token of
    the vocabulary (`claim`: "x/config.json sets vocab_size to 300"); `fix` says what to do. A
    config and the weights of two different models differ here first."""
    if rows != vocab_size:
        raise ModelLoadError(f"{claim}, but {table} has {rows:,} rows: {fix}")


def layers_held(held: set[int], n_layer: int) -> int | None:
    """Of a model's n_layer layers, the weights holding those in `held`: how many they hold where
    they hold the first k and no later one (k < n_layer), else None (all, or a gap to name by the
    first tensor missing)."""
    first = min(set(range(n_layer)) - held, default=n_layer)  # (held may count past n_layer)
    return first if first < n_layer and not held & set(range(first, n_layer)) else None


def blocks_held(names, n_layer: int) -> int | None:
    """layers_held of the layers whose tensors are among `names`, named as llama.cpp names them
    ("blk.3.attn_q.weight": layer 3)."""
    return layers_held(block_numbers(names), n_layer)


def block_numbers(names) -> set[int]:
    """The layers whose tensors are among `names`, named as llama.cpp names them."""
    parts = (n.split(".") for n in names)
    return {int(p[1]) for p in parts if len(p) > 1 and p[0] == "blk" and p[1].isascii() and p[1].isdigit()}


def layers_beyond(held: set[int], n_layer: int, claim: str, weights: str) -> str | None:
    """One line where `weights` hold layers past the n_layer that `claim` gives ("x sets
    block_count to 2"): they are left unread, as Transformers leaves them; None where none are held."""
    if not held or max(held) < n_layer:
        return None
    top = max(held)
    which = f"{top + 1:,} layers" if held >= set(range(top + 1)) else f"layers up to layer {top:,}"
    read = "only layer 0 is read" if n_layer == 1 else f"only the first {n_layer:,} are read"
    line = f"{claim}; {weights} holds {which}: {read}"
    log.warning("%s", line)  # a command shows it so; the window shows the model's notice
    return line


def too_few_layers(claim: str, held: int, weights: str, fix: str) -> ModelLoadError:
    """`claim` gives the layer count ("x sets block_count to 9"), but `weights` hold the tensors of
    only the first `held` layers; `fix` says what to do."""
    which = {0: "no layer", 1: "only layer 0"}.get(held, f"only layers 0..{held - 1:,}")
    return ModelLoadError(f"{claim}, but {weights} holds {which}: {fix}")


def check_finite(arr: np.ndarray, name: str, source: str) -> None:
    """Refuse a tensor holding NaN or Inf, naming it, the count and the first position (in
    SCAN_CHUNK passes: a load checks every weight, benchmarks/smollm2.py measures the load)."""
    flat = np.asarray(arr).reshape(-1)
    for start in range(0, flat.size, SCAN_CHUNK):
        if not np.isfinite(flat[start:start + SCAN_CHUNK]).all():
            break
    else:
        return
    bad = ~np.isfinite(flat)
    first = int(np.flatnonzero(bad)[0])
    where = list(np.unravel_index(first, np.shape(arr)))
    n = int(bad.sum())
    raise ModelLoadError(
        f"{source}: tensor {name} holds {n:,} non-finite value{'s' if n > 1 else ''} (the first, "
        f"{float(flat[first])} at {[int(i) for i in where]}), expected finite numbers: "
        "the file is damaged, or the model was saved after its training diverged")
