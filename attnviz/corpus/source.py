"""Reading a corpus file into texts: `.txt` (one text per line, or paragraphs between blank lines),
`.jsonl` (a `text` field) or `.parquet` (a `text` column).

A file attnviz cannot read as a corpus at all (binary, empty, no such column) is an InputError with
one clear message. A single entry that cannot be a text (a line that is not UTF-8, a JSON line that
is not an object with the field, a null) keeps its place and its id, and carries its error to
`errors.parquet`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from attnviz.engine.errors import InputError
from attnviz.engine.reading.validate import exists, regular_file

SUFFIXES = (".txt", ".jsonl", ".parquet")
SPLITS = ("lines", "paragraphs")
DEFAULT_COLUMN = "text"
_BLANK = re.compile(rb"\r?\n(?:[ \t\r\f\v]*\r?\n)+")  # one or more blank lines


@dataclass(frozen=True)
class Corpus:
    """The texts of a corpus file, in order; text_id is the index. `errors[text_id]` is why an entry
    cannot be run (its text then holds what could be read of it)."""

    path: Path
    texts: list
    errors: dict = field(default_factory=dict)
    sha256: str = ""

    def __len__(self):
        return len(self.texts)


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_corpus(path, split: str = "lines", column: str | None = None) -> Corpus:
    """path -> Corpus. `split` applies to .txt, `column` to .jsonl (field) and .parquet."""
    path = Path(path)
    if not exists(path):
        raise InputError(f"corpus {path}: no such file")
    regular_file(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"corpus {path.name}: a corpus is a {', '.join(SUFFIXES)} file, not "
                         f"{suffix or 'a file without a suffix'}")
    if split not in SPLITS:
        raise InputError(f"--split {split!r} is not one of {', '.join(SPLITS)}")
    if suffix == ".txt" and column is not None:
        raise InputError("--column applies to .jsonl and .parquet corpora, not .txt")
    if suffix != ".txt" and split != "lines":
        raise InputError("--split applies to .txt corpora only")
    if path.stat().st_size == 0:
        raise InputError(f"corpus {path} is empty")
    if suffix == ".parquet":
        texts, errors = _read_parquet(path, column or DEFAULT_COLUMN)
    else:
        data = path.read_bytes()
        nul = data.find(b"\0")
        if nul >= 0:
            raise InputError(f"corpus {path} looks binary (a NUL byte at offset {nul}): a .txt or "
                             ".jsonl corpus is UTF-8 text")
        if suffix == ".jsonl":
            texts, errors = _read_jsonl(data, path, column or DEFAULT_COLUMN)
        else:
            texts, errors = _read_txt(data, split)
    if not texts:
        raise InputError(f"corpus {path} holds no texts" +
                         (" (only blank lines)" if suffix == ".txt" else ""))
    if len(errors) == len(texts) and suffix == ".txt":
        first = errors[0]
        raise InputError(f"corpus {path}: no entry could be read as a text ({first})")
    return Corpus(path=path, texts=texts, errors=errors, sha256=file_sha256(path))


def _decode(raw: bytes, where: str) -> tuple[str, str | None]:
    """bytes -> (text, error or None); text that is not UTF-8 keeps its readable part."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return (raw.decode("utf-8", errors="replace"),
                f"{where}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})")


def _read_txt(data: bytes, split: str) -> tuple[list, dict]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte-order mark
    texts, errors = [], {}
    if split == "lines":
        pieces = [(n + 1, line) for n, line in enumerate(data.split(b"\n"))]
        what = "line"
    else:
        pieces, line = [], 1
        pos = 0
        for m in _BLANK.finditer(data):
            pieces.append((line, data[pos:m.start()]))
            line += data[pos:m.end()].count(b"\n")
            pos = m.end()
        pieces.append((line, data[pos:]))
        what = "paragraph at line"
    for line, raw in pieces:
        raw = raw.strip()
        if not raw:
            continue
        text, err = _decode(raw, f"{what} {line}")
        if err:
            errors[len(texts)] = err
        texts.append(text.replace("\r\n", "\n"))
    return texts, errors


def _read_jsonl(data: bytes, path: Path, column: str) -> tuple[list, dict]:
    texts, errors = [], {}
    seen_fields = None
    has_field = False
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        line, err = _decode(raw, f"line {n}")
        if err is None:
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                obj, err = None, f"line {n}: not JSON ({getattr(exc, 'msg', type(exc).__name__)})"
        if err is None and not isinstance(obj, dict):
            err = f"line {n}: a JSON {type(obj).__name__}, not an object with a {column!r} field"
        elif err is None:
            seen_fields = seen_fields or list(obj)
            if column not in obj:
                err = f"line {n}: no {column!r} field"
            elif not isinstance(obj[column], str):
                has_field = True
                err = f"line {n}: the {column!r} field is {type(obj[column]).__name__}, not a string"
            else:
                has_field = True
                texts.append(obj[column])
                continue
        errors[len(texts)] = err
        texts.append(line.strip() if isinstance(line, str) else "")
    if texts and not has_field:
        fields = f"; its objects' fields: {', '.join(map(repr, seen_fields[:10]))}" if seen_fields else ""
        raise InputError(f"corpus {path}: no line has a {column!r} field (--column names another)"
                         f"{fields}")
    return texts, errors


def _read_parquet(path: Path, column: str) -> tuple[list, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"corpus {path} is not a readable Parquet file: {exc}") from None
    if column not in schema.names:
        raise InputError(f"corpus {path} has no {column!r} column (--column names another); its "
                         f"columns: {', '.join(schema.names) or 'none'}")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(f"corpus {path}: column {column!r} holds {kind}, not strings")
    try:
        values = pq.read_table(path, columns=[column]).column(column).to_pylist()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"corpus {path}: column {column!r} cannot be read: {exc}") from None
    texts, errors = [], {}
    for i, v in enumerate(values):
        if v is None:
            errors[len(texts)] = f"row {i}: null text"
            v = ""
        texts.append(v)
    return texts, errors
