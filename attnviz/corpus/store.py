"""A scan folder: `scan.json` (what was scanned, with which model and options), one Parquet file per
batch and table, written atomically, and the DuckDB queries that read them back.

    DIR/scan.json
    DIR/heads/batch-000012.parquet      one row per (text_id, layer, head)
    DIR/examples/batch-000012.parquet   the batch's top-K cells per head
    DIR/texts/batch-000012.parquet      text_id, text
    DIR/errors/batch-000012.parquet     text_id, text, error (often no rows)
    DIR/errors.parquet                  every batch's errors, written when the scan finishes

A batch is finished when its four files exist: they are renamed into place in that order, heads
last, each from a temporary name in the same folder. A rerun writes a half-finished batch again
(the same rows, the same names), so no text is ever stored twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz.engine.analysing.corpus_stats import HEAD_STATS
from attnviz.engine.errors import InputError
from attnviz.engine.reading.token_text import plural
from attnviz.engine.reading.json_text import dumps as strict_json

SCAN_KIND = "attnviz-scan"
SCAN_VERSION = 1
MANIFEST = "scan.json"
ERRORS_FILE = "errors.parquet"
TABLES = ("errors", "texts", "examples", "heads")  # the order a batch's files are renamed in
MODEL_SUFFIXES = (".json", ".safetensors", ".gguf")  # what a model's hash covers
# the options that change what is stored: a resume must use the same
OPTION_FLAGS = {"split": "--split", "column": "--column", "batch": "--batch",
                "max_tokens": "--max-tokens", "examples": "--examples"}


# ---------------------------------------------------------------- schemas

def schemas():
    import pyarrow as pa

    i32, i64, f64 = pa.int32(), pa.int64(), pa.float64()
    return {
        "heads": pa.schema([("text_id", i64), ("layer", i32), ("head", i32), ("n_tokens", i32)]
                           + [(name, f64) for name in HEAD_STATS]),
        "examples": pa.schema([("layer", i32), ("head", i32), ("text_id", i64), ("query_pos", i32),
                               ("key_pos", i32), ("weight", pa.float32()),
                               ("query_token", pa.string()), ("key_token", pa.string())]),
        "texts": pa.schema([("text_id", i64), ("text", pa.string())]),
        "errors": pa.schema([("text_id", i64), ("text", pa.string()), ("error", pa.string())]),
    }


# ---------------------------------------------------------------- files

def batch_path(out: Path, table: str, index: int) -> Path:
    return Path(out) / table / f"batch-{index:06d}.parquet"


def finished_batches(out: Path, n_batches: int) -> set:
    """Indices of the batches whose four files are all in place."""
    have = None
    for table in TABLES:
        folder = Path(out) / table
        names = {p.name for p in folder.glob("batch-*.parquet")} if folder.is_dir() else set()
        have = names if have is None else have & names
    done = set()
    for name in have or ():
        stem = name[len("batch-"):-len(".parquet")]
        if stem.isdigit() and int(stem) < n_batches:
            done.add(int(stem))
    return done


def remove_leftovers(out: Path) -> int:
    """Delete temporary files an interrupted batch left behind; -> how many."""
    n = 0
    for table in TABLES:
        for p in (Path(out) / table).glob(".batch-*.tmp-*"):
            p.unlink(missing_ok=True)
            n += 1
    return n


def write_parquet_atomic(table, path: Path) -> None:
    """A pyarrow Table to `path` through a temporary name in the same folder, then a rename: a
    reader sees the whole file or none."""
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_batch(out: Path, index: int, tables: dict) -> None:
    """A batch's four tables, each atomically, heads last (the batch counts as done after it)."""
    for name in TABLES:
        write_parquet_atomic(tables[name], batch_path(out, name, index))


def write_errors_file(out: Path) -> int:
    """DIR/errors.parquet: every batch's errors, by text_id; -> the number of rows."""
    import pyarrow as pa

    rows = query(out, "SELECT text_id, text, error FROM errors ORDER BY text_id", tables=("errors",))
    table = pa.Table.from_pylist([dict(zip(("text_id", "text", "error"), r)) for r in rows],
                                 schema=schemas()["errors"])
    write_parquet_atomic(table, Path(out) / ERRORS_FILE)
    return len(rows)


# ---------------------------------------------------------------- the manifest

def model_files(path: Path) -> list:
    """The files a model's hash covers: a GGUF file itself, or a folder's top-level config,
    tokenizer and weights files (.json, .safetensors), by name."""
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted((p for p in path.iterdir() if p.is_file() and p.suffix in MODEL_SUFFIXES),
                  key=lambda p: p.name)


def model_sha256(path: Path) -> str:
    """One hash over a model's files (their names and bytes)."""
    h = hashlib.sha256()
    for f in model_files(path):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Manifest:
    model: str  # the name the model was loaded by (--model)
    model_name: str  # its display name
    model_sha256: str
    n_layer: int
    n_head: int
    corpus: str
    corpus_sha256: str
    n_texts: int
    n_batches: int
    options: dict
    complete: bool = False
    n_errors: int | None = None

    def to_json(self) -> dict:
        return {"kind": SCAN_KIND, "version": SCAN_VERSION, "model": self.model,
                "model_name": self.model_name, "model_sha256": self.model_sha256,
                "n_layer": self.n_layer, "n_head": self.n_head, "corpus": self.corpus,
                "corpus_sha256": self.corpus_sha256, "n_texts": self.n_texts,
                "n_batches": self.n_batches, "options": dict(self.options),
                "complete": self.complete, "n_errors": self.n_errors}


def read_manifest(out: Path) -> Manifest:
    """DIR/scan.json -> Manifest; InputError when it is missing or not a scan's."""
    from attnviz.engine.reading.validate import read_json_object

    path = Path(out) / MANIFEST
    if not path.is_file():
        raise InputError(f"{out} is not a scan folder: it has no {MANIFEST}")
    try:
        doc = read_json_object(path)
    except Exception as exc:  # the engine's reader names the file and the fault
        raise InputError(f"{path}: {exc}") from None
    if doc.get("kind") != SCAN_KIND:
        raise InputError(f"{path} is not an attnviz scan (kind {doc.get('kind')!r})")
    if doc.get("version") != SCAN_VERSION:
        raise InputError(f"{path}: scan version {doc.get('version')!r}; this attnviz reads "
                         f"version {SCAN_VERSION}")
    try:
        return Manifest(**{k: doc[k] for k in Manifest.__dataclass_fields__ if k in doc})
    except TypeError as exc:
        raise InputError(f"{path} lacks a field: {exc}") from None


def write_manifest(out: Path, manifest: Manifest) -> None:
    write_bytes_atomic(Path(out) / MANIFEST, (strict_json(manifest.to_json(), indent=1) + "\n").encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def differences(old: Manifest, new: Manifest) -> list:
    """What makes `new` another scan than `old`, in words; [] when a resume may continue it."""
    found = []
    if old.model_sha256 != new.model_sha256:
        found.append(f"model {old.model_name} (sha256 {old.model_sha256[:12]}), not "
                     f"{new.model_name} (sha256 {new.model_sha256[:12]})")
    if old.corpus_sha256 != new.corpus_sha256:
        found.append(f"corpus {old.corpus} (sha256 {old.corpus_sha256[:12]}), not {new.corpus} "
                     f"(sha256 {new.corpus_sha256[:12]})")
    for key, flag in OPTION_FLAGS.items():
        a, b = old.options.get(key), new.options.get(key)
        if a != b:
            found.append(f"{flag} {_flag_value(a)}, not {_flag_value(b)}")
    return found


def _flag_value(v) -> str:
    return "(not given)" if v is None else str(v)


class ScanLock:
    """One scan writes into a folder at a time: an exclusive lock on DIR/.lock, released when the
    process ends however it ends."""

    def __init__(self, out: Path):
        self.path = Path(out) / ".lock"
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise InputError(f"{self.path.parent} is being written by another attnviz scan") from None
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# ---------------------------------------------------------------- reading with DuckDB

def table_files(out: Path, table: str) -> list:
    folder = Path(out) / table
    return sorted(str(p) for p in folder.glob("batch-*.parquet")) if folder.is_dir() else []


def query(out: Path, sql: str, params=None, tables=TABLES) -> list:
    """Rows of `sql` over the scan's tables, each a view named after it (heads, examples, texts,
    errors) over its batch files; a table with no file yet is an empty view of its schema."""
    import duckdb

    con = duckdb.connect()
    try:
        for name in tables:
            files = table_files(out, name)
            if files:
                con.read_parquet(files).create_view(name)
            else:
                con.register(name, schemas()[name].empty_table())
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def head_means(out: Path, n_layer: int, n_head: int) -> dict:
    """Each statistic's mean over the scanned texts per head: {name: float64 [n_layer, n_head]}
    (NaN where no text gave a value), and "texts": how many texts each head's means cover."""
    avgs = ", ".join(f"avg({name})" for name in HEAD_STATS)
    rows = query(out, f"SELECT layer, head, count(*), {avgs} FROM heads GROUP BY layer, head",
                 tables=("heads",))
    means = {name: np.full((n_layer, n_head), np.nan) for name in ("texts",) + HEAD_STATS}
    for layer, head, count, *vals in rows:
        if 0 <= layer < n_layer and 0 <= head < n_head:
            means["texts"][layer, head] = count
            for name, v in zip(HEAD_STATS, vals):
                means[name][layer, head] = np.nan if v is None else v
    return means


def stat_texts(out: Path) -> dict:
    """{name: (fewest, most)}: over the heads, how many texts gave each statistic (a text with more
    than heads.UNKNOWN_LIMIT unknown tokens gives no duplicate or induction value); (0, 0) when
    no head has a row."""
    counts = ", ".join(f"count({name}) AS {name}" for name in HEAD_STATS)
    bounds = ", ".join(f"min({name}), max({name})" for name in HEAD_STATS)
    (row,) = query(out, f"SELECT {bounds} FROM (SELECT {counts} FROM heads GROUP BY layer, head)",
                   tables=("heads",))
    return {name: (int(row[2 * i] or 0), int(row[2 * i + 1] or 0)) for i, name in enumerate(HEAD_STATS)}


def fewer_texts(stat_texts: dict, scanned: int) -> dict:
    """{statistic: "over N texts"} for each statistic whose means are over fewer texts than were
    scanned (duplicate and induction leave out texts with too many unknown tokens); "over N..M
    texts" where the heads differ; "no text gave a value" where none did (never "over 0 texts")."""
    return {name: "no text gave a value" if hi == 0 else f"over {plural(hi, 'text')}" if lo == hi
            else f"over {lo}..{plural(hi, 'text')}"
            for name, (lo, hi) in stat_texts.items() if (lo, hi) != (scanned, scanned)}


TOP_EXAMPLES_SQL = """
SELECT layer, head, text_id, query_pos, key_pos, weight, query_token, key_token
FROM examples
{where}
QUALIFY row_number() OVER (PARTITION BY layer, head
                           ORDER BY weight DESC, text_id, query_pos, key_pos) <= ?
ORDER BY layer, head, weight DESC, text_id, query_pos, key_pos
"""


@dataclass(frozen=True)
class Example:
    layer: int
    head: int
    text_id: int
    query_pos: int
    key_pos: int
    weight: float
    query_token: str
    key_token: str
    text: str | None = None


def top_examples(out: Path, k: int, layer: int | None = None, head: int | None = None,
                 with_text: bool = False) -> list:
    """The corpus top-k of each head (or of one), merged from the batches' top-k by DuckDB."""
    where, params = "", []
    if layer is not None:
        where, params = "WHERE layer = ? AND head = ?", [int(layer), int(head)]
    sql = TOP_EXAMPLES_SQL.format(where=where)
    if with_text:
        sql = (f"SELECT e.*, t.text FROM ({sql}) e LEFT JOIN texts t USING (text_id) "
               "ORDER BY layer, head, weight DESC, text_id, query_pos, key_pos")
    rows = query(out, sql, params + [int(k)], tables=("examples", "texts"))
    return [Example(*r) for r in rows]


def text_of(out: Path, text_id: int) -> str | None:
    rows = query(out, "SELECT text FROM texts WHERE text_id = ?", [int(text_id)], tables=("texts",))
    return rows[0][0] if rows else None


def counts(out: Path) -> dict:
    """texts stored, error rows, texts scanned (those that gave statistics: every stored text but
    its errors, which are stored in the texts table too), head rows. The scanned count is the one
    the heads' means are over, to be shown wherever they are."""
    (texts,), = query(out, "SELECT count(*) FROM texts", tables=("texts",))
    (errors,), = query(out, "SELECT count(*) FROM errors", tables=("errors",))
    (rows,), = query(out, "SELECT count(*) FROM heads", tables=("heads",))
    return {"texts": texts, "errors": errors, "scanned": texts - errors, "head_rows": rows}
