"""`attnviz calc`: shapes, parameters, FLOPs and KV cache of an attention layout or a real model."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

from attnviz.engine.calc import (
    ARCH_STYLES, CONVENTIONS, KV_DTYPE_BITS, MLA, MLA_ROPE_HEAD_DIM, CalcInputs, CalcResult, calc_inputs_from_file, calculate,
    compare_cells, compare_note, per_token_header,
    exact_bytes, exact_count, format_bytes, format_count, latent_readers, plural, shown_variants, tokens, window_layers_text,
)
from attnviz.commands.checks import positive
from attnviz.engine.calc.flops import heads_vs_text, parts
from attnviz.engine.calc.from_config import CONFIG_FILES, UnreadableConfig
from attnviz.engine.errors import CalcError
from attnviz.engine.calc.presets import Preset, get_preset, load_presets
from attnviz.engine.reading.json_text import dumps as strict_json

DEFAULT_SEQ_LEN = 4096  # free fields with no --max-positions

# flag (its argparse dest) -> CalcInputs field: the flags keep the names they have always had, and
# take the engine's as aliases (--n-head, --n-kv-head, --d-head, --n-layer)
_FIELDS = {
    "d_model": "d_model", "n_heads": "n_head", "n_kv_heads": "n_kv_head",
    "head_dim": "d_head", "n_layers": "n_layer", "d_ff": "d_ff", "vocab": "vocab_size",
    "max_positions": "max_positions", "seq_len": "seq_len", "batch": "batch",
    "kv_dtype": "kv_dtype", "sliding_window": "sliding_window",
    "sliding_window_layers": "sliding_window_layers",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calc", help="shapes, parameters, FLOPs and KV-cache size of multi-head attention",
        description="Shapes ([out, in]), parameters, FLOPs and KV cache of an attention layout: "
                    "a preset of a real model, a model's config.json, or free numbers. Flags "
                    "given with --preset or --config override the model's values.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", metavar="ID", help="a real model (see --list-presets)")
    src.add_argument("--config", metavar="PATH", help="a config.json, a model folder holding one, or a .gguf (its header)")
    p.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    p.add_argument("--d-model", type=positive, metavar="N", help="model width")
    p.add_argument("--n-heads", "--n-head", type=positive, metavar="N", help="query heads")
    p.add_argument("--n-kv-heads", "--n-kv-head", type=positive, metavar="N",
                   help="key/value heads (default n-heads: MHA; 1: MQA; between: GQA)")
    p.add_argument("--head-dim", "--d-head", type=positive, metavar="N",
                   help="width per head, d_head (default d-model / n-heads)")
    p.add_argument("--n-layers", "--n-layer", type=positive, metavar="N", help="layers")
    p.add_argument("--d-ff", type=positive, metavar="N", help="MLP hidden width (for the model total)")
    p.add_argument("--vocab", type=positive, metavar="N", help="vocabulary size (for the model total)")
    p.add_argument("--max-positions", type=positive, metavar="N", help="longest context of the model")
    p.add_argument("--seq-len", type=positive, metavar="N",
                   help=f"tokens in the cache (default: the model's max, else {DEFAULT_SEQ_LEN})")
    p.add_argument("--batch", type=positive, metavar="N", help="sequences (default 1)")
    p.add_argument("--kv-dtype", choices=list(KV_DTYPE_BITS), help="cache dtype (default fp16)")
    p.add_argument("--sliding-window", type=positive, metavar="N", help="tokens a windowed layer keeps")
    p.add_argument("--sliding-window-layers", metavar="SPEC", type=window_layers_spec,
                   help="layers with the window: all (default), even, odd, or indices 0,2,4")
    p.add_argument("--kv-lora-rank", type=positive, metavar="N", help="MLA: compressed KV width")
    p.add_argument("--qk-rope-head-dim", type=positive, metavar="N", help="MLA: shared RoPE key width")
    p.add_argument("--arch", choices=list(ARCH_STYLES),
                   help="what the model total counts beyond attention (default llama: RMSNorm, "
                        "no biases, gated MLP)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_calc)


def inputs_from_args(args) -> tuple[CalcInputs, Preset | None]:
    """The preset or config given, with every explicit flag laid over it."""
    preset = None
    if args.preset:
        preset = get_preset(args.preset)
        base: dict = {}
        inputs = preset.inputs
    elif args.config:
        inputs, base = _read_config(args.config), {}
    else:
        inputs, base = None, {"arch": ARCH_STYLES[args.arch or "llama"]}
    overrides = {field: getattr(args, flag) for flag, field in _FIELDS.items()
                 if getattr(args, flag) is not None}
    if args.arch and inputs is not None:
        overrides["arch"] = ARCH_STYLES[args.arch]
    if args.kv_lora_rank is not None or args.qk_rope_head_dim is not None:
        old = inputs.mla if inputs is not None else None
        overrides["mla"] = MLA(
            kv_lora_rank=args.kv_lora_rank if args.kv_lora_rank is not None else
            (old.kv_lora_rank if old else 512),
            qk_rope_head_dim=args.qk_rope_head_dim if args.qk_rope_head_dim is not None else
            (old.qk_rope_head_dim if old else MLA_ROPE_HEAD_DIM),
            qk_nope_head_dim=old.qk_nope_head_dim if old else None,
            v_head_dim=old.v_head_dim if old else None,
            q_lora_rank=old.q_lora_rank if old else None)
    if inputs is None:
        missing = [f"--{f.replace('_', '-')}" for f in ("d_model", "n_heads", "n_layers")
                   if _FIELDS[f] not in overrides]
        if missing:
            raise CalcError("give --preset ID, --config PATH, or at least --d-model, --n-heads and "
                            f"--n-layers (missing: {', '.join(missing)})")
        inputs = CalcInputs(**base, **overrides)
    else:
        inputs = replace(inputs, **overrides)
    if inputs.seq_len is None and inputs.max_positions is None:
        inputs = replace(inputs, seq_len=DEFAULT_SEQ_LEN)
    return inputs, preset


# a CalcInputs field -> the flag that sets it
FLAG_OF = {field: f"--{flag.replace('_', '-')}" for flag, field in _FIELDS.items()} | {
    "kv_lora_rank": "--kv-lora-rank", "qk_rope_head_dim": "--qk-rope-head-dim"}
_FIELD_WORDS = re.compile(r"\b(" + "|".join(sorted(FLAG_OF, key=len, reverse=True)) + r")\b")


def flag_words(message: str, args) -> str:
    """A calculator message as the command line reads it: a value set by a flag is named by its
    flag (--n-heads, not n_head), every value where no model was given (each is a flag or its
    default); where a named value came from --config or --preset, the message says from where."""
    source = args.config or (f"preset {args.preset}" if args.preset else None)
    given = {field for flag, field in _FIELDS.items() if getattr(args, flag) is not None}
    given |= {f for f in ("kv_lora_rank", "qk_rope_head_dim") if getattr(args, f) is not None}
    message = _FIELD_WORDS.sub(lambda m: FLAG_OF[m[1]] if source is None or m[1] in given else m[1],
                               message)
    if source is not None and _FIELD_WORDS.search(message):
        return f"{source}: {message}"
    return message


def window_layers_spec(text: str) -> str:
    """An argparse `type` for --sliding-window-layers: all, even, odd or indices "0,2,4"."""
    if text in ("all", "even", "odd"):
        return text
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected all, even, odd or layer indices such as 0,2,4; "
                                         f"got {text!r}")
    return ",".join(parts)




def _read_config(path: str) -> CalcInputs:
    """--config's model: a config.json, a folder holding one, or a GGUF's header (the engine's
    calc_inputs_from_file); a file it cannot read says what --config takes."""
    try:
        return calc_inputs_from_file(path)
    except UnreadableConfig as exc:
        raise CalcError(f"{exc}; --config takes {CONFIG_FILES}") from exc


def cmd_calc(args) -> int:
    if args.list_presets:
        others = [f"--{flag.replace('_', '-')}" for flag in (*_FIELDS, "preset", "config", "arch",
                                                            "kv_lora_rank", "qk_rope_head_dim")
                  if getattr(args, flag) is not None]
        if others:
            raise CalcError(f"--list-presets takes no other flags but --json (got {', '.join(others)})")
        return list_presets(args.json)
    inputs, preset = inputs_from_args(args)
    try:
        result = calculate(inputs)
    except CalcError as exc:
        raise CalcError(flag_words(str(exc), args)) from exc
    if args.json:
        out = result.to_dict()
        if preset is not None:
            out["preset"] = {k: preset.raw.get(k) for k in (
                "id", "name", "attention_type", "attention_notes", "source", "nominal_params",
                "known_total_params")}
        print(strict_json(out, indent=1, ensure_ascii=False))
    else:
        print(render_table(result, preset))
    return 0


def list_presets(as_json: bool) -> int:
    presets = load_presets()
    if as_json:
        print(strict_json([p.raw for p in presets.values()], indent=1, ensure_ascii=False))
        return 0
    rows = [("ID", "NAME", "KIND", "d_model", "heads/kv x d_head", "layers", "max ctx",
             "KV/token fp16")]
    for p in presets.values():
        r = calculate(p.inputs)
        kv = "latent" if r.attention_kind == "MLA" else str(r.inputs.n_kv_head)
        rows.append((p.id, p.name, r.attention_kind, str(p.inputs.d_model),
                     f"{p.inputs.n_head}/{kv} x {r.d_head}", str(p.inputs.n_layer),
                     f"{p.inputs.max_positions:,}", format_bytes(r.kv_bytes_per_token)))
    print(_columns(rows))
    return 0


def _columns(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def render_table(r: CalcResult, preset: Preset | None = None) -> str:
    i, f = r.inputs, r.formulas
    T = i.seq_len
    lines = []
    title = f"{preset.name} ({preset.id})" if preset else "attention layout"
    lines.append(f"{title}: {r.attention_kind}, KV cache in {i.kv_dtype}, seq_len {T:,}, "
                 f"batch {i.batch:,}")
    if preset:
        lines.append(f"source: {preset.source}")
    lines.append(f"conventions: {CONVENTIONS}")

    lines += ["", "Dimensions"]
    kv = "latent (MLA)" if r.attention_kind == "MLA" else str(i.n_kv_head)
    groups = (f"query heads per KV head {r.group_size}" if r.group_size is not None
              else f"{latent_readers(i.n_head)} one shared latent")
    lines.append(f"  d_model {i.d_model}   n_head {i.n_head}   n_kv_head {kv}   d_head {r.d_head}"
                 f"   n_layer {i.n_layer}   {groups}")
    lines.append(f"  d_head: {f['d_head']}")
    if i.sliding_window:
        lines.append(f"  sliding window {tokens(i.sliding_window)} on "
                     f"{window_layers_text(i.sliding_window_layers)}")

    lines += ["", "Weight shapes [out, in]"]
    rows = [(f"  {name}", str(list(shape)), f.get(name, "")) for name, shape in r.shapes.items()]
    lines.append(_columns(rows))
    lines += ["", f"Activations (T = {T:,})"]
    rows = [(f"  {name}", str(list(shape)), f.get(name, ""))
            for name, shape in r.activation_shapes.items()]
    lines.append(_columns(rows))

    lines += ["", "Parameters"]
    rows = [("  attention per layer", exact_count(r.attn_params_per_layer), f["attn_params_per_layer"]),
            ("  attention, all layers", exact_count(r.attn_params_total), f"· {plural(i.n_layer, 'layer')}")]
    mp = r.model_params
    if mp:
        rows.append(("  whole model", exact_count(mp["total"]), f"non-embedding {format_count(mp['non_embedding'])}"))
        if "active" in mp:
            rows.append(("  active per token (MoE)", exact_count(mp["active"]), ""))
    else:
        rows.append(("  whole model", "-", "needs --d-ff and --vocab"))
    if preset and preset.known_total_params:
        ok = "matches" if mp and mp["total"] == preset.known_total_params else "DIFFERS from"
        rows.append(("  known total", exact_count(preset.known_total_params), f"{ok} the computed total"))
    elif preset and preset.nominal_params and mp:
        rows.append(("  nominal size", format_count(preset.nominal_params),
                     f"{preset.raw.get('nominal_params_source', '')}; computed/nominal "
                     f"{mp['total'] / preset.nominal_params:.3f}"))
    lines.append(_columns(rows))

    fl = r.flops
    form = ", MLA absorbed form" if r.attention_kind == "MLA" else ""
    lines += ["", f"Attention FLOPs of one decode step{form}: {fl['scope']}"]
    rows = [(f"  {label}", exact_count(n)) for label, n in parts(fl, i.n_head)]
    rows.append(("  softmax", f"{fl['softmax_elements_per_token']:,} scores"))
    lines.append(_columns(rows))
    if "mla_form" in fl:
        lines.append(f"  {fl['mla_form']}")
    lines.append("  " + heads_vs_text(fl, i.n_head, i.n_kv_head, r.d_head))

    lines += ["", f"KV cache ({i.kv_dtype}, {r.kv_bits_per_element} bits per element)"]
    rows = [("  per token per layer", exact_bytes(r.kv_bytes_per_token_per_layer),
             f["kv_bytes_per_token_per_layer"]),
            ("  per token", exact_bytes(r.kv_bytes_per_token), f["kv_bytes_per_token"]),
            (f"  sequence of {tokens(T)}", exact_bytes(r.kv_bytes_sequence), f["kv_bytes_sequence"]),
            (f"  batch of {i.batch:,}", exact_bytes(r.kv_bytes_total), f["kv_bytes_total"])]
    lines.append(_columns(rows))

    lines += ["", "MHA / as given / MQA"]
    rows = [("  variant", "KV heads", per_token_header(r), f"at {tokens(T)} x batch {i.batch:,}", "reduction vs MHA")]
    for v in (r.compare[k] for k in shown_variants(r)):
        rows.append((f"  {v.label}", *compare_cells(v, r)))
    lines.append(_columns(rows))
    if compare_note(r):  # (past a window the total is not per token × seq_len)
        lines.append(f"  {compare_note(r)}")
    for w in r.warnings:
        lines.append(f"note: {w}")
    return "\n".join(lines)

