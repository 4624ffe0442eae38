"""`attnviz quantize`: write a model to a GGUF file at one of GGUF's types."""

from __future__ import annotations

import argparse
import sys
import time

from attnviz.commands.checks import add_model, check_out
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.gguf_write import WRITE_TYPES, write_gguf
from attnviz.engine.reading.quantize import quant_type
from attnviz.engine.reading.registry import resolve
from attnviz.engine.reading.json_text import dumps as strict_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quantize", help="write a model to a GGUF file at Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, F16 or BF16",
        description="Write a model (a GGUF file, a safetensors folder or a model name) to a GGUF "
                    "file: its 2-D weight matrices at --type (F16 where a row does not fit the "
                    "type's blocks), norms and other 1-D tensors at F32, its architecture metadata "
                    "and tokenizer kept. The file opens in attnviz, llama.cpp and transformers.")
    add_model(p, "the model to write")
    p.add_argument("--type", required=True, metavar="TYPE", dest="qtype",
                   help=f"one of {', '.join(WRITE_TYPES)} (F32: converted without rounding)")
    p.add_argument("--out", required=True, metavar="FILE.gguf", help="the GGUF file to write")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args) -> int:
    quant_type(args.qtype, WRITE_TYPES)  # an unknown type or output before the model is looked up
    check_out(args.out, (".gguf",))
    name, where, _ = resolve(args.model)
    t0 = time.perf_counter()
    w = write_gguf(where, args.qtype, args.out, name=name)
    spent = time.perf_counter() - t0
    for notice in w.notices:
        print(f"attnviz quantize: note: {notice}", file=sys.stderr)
    if args.json:
        print(strict_json({"model": name, "source": str(where), "out": str(w.path), "type": w.qtype,
                          "bytes": w.n_bytes, "tensors": w.counts, "kept_f16": w.kept_f16,
                          "notices": w.notices, "seconds": round(spent, 3)}, indent=2))
        return 0
    counts = ", ".join(f"{n} at {t}" for t, n in sorted(w.counts.items(), key=lambda kv: -kv[1]))
    print(f"wrote {w.path} ({format_bytes(w.n_bytes)}) from {name} in {spent:.1f} s")
    print(f"  {sum(w.counts.values())} tensors: {counts}")
    print("  F32: norms, biases and other 1-D tensors (kept exact)")
    if w.kept_f16:
        shown = ", ".join(f"{n} ({c} a row)" for n, c in w.kept_f16.items())
        print(f"  F16 instead of {w.qtype}, rows not a whole number of its blocks: {shown}")
    return 0
