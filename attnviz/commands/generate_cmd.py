"""`attnviz generate`: new tokens from a prompt, one KV-cached step each, with what each step cost."""

from __future__ import annotations

import argparse

from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.token_text import tokens
from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import (
    KERNELS_STEPS, add_model, blas_for, load_for_generation, non_negative, parse_ids, positive, prediction_head,
    show_notice)
from attnviz.engine.reading.json_text import dumps as strict_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate tokens from a prompt, one cached step each",
        description="Generate up to --max-new tokens after the prompt, one KV-cached step each: "
                    "greedy by default, or drawn at --temperature from the --top-p most likely "
                    "tokens with --seed. Stops at the model's end-of-sequence token unless "
                    "--ignore-eos. Prints the prompt with the new tokens, then one line: how many "
                    "were made, why it stopped, and the bytes of K and V at the last step (and held "
                    "with their room for the next positions). Only --json reports each step: its "
                    "token, the model's top-5 (with each one's probability in the draw when "
                    "sampling) and the bytes of K and V the engine held when it was chosen.")
    add_model(p, "a causal language model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="the prompt (the model's special tokens are added)")
    src.add_argument("--ids", help="comma-separated prompt token ids, run as given")
    p.add_argument("--max-new", type=positive, required=True, metavar="N",
                   help=f"the most new tokens to generate; from {KERNELS_STEPS} on, a GGUF file of any "
                        "size runs on the quantised kernels (faster steps, a slower start)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="X",
                   help="0 (the default): greedy; above 0: sample at this temperature")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="sample from the smallest set of most likely tokens whose probability "
                        "reaches P (default 1: all)")
    p.add_argument("--seed", type=non_negative, default=None, metavar="S", help="seed of the sampler, >= 0")
    p.add_argument("--ignore-eos", action="store_true",
                   help="go on past the model's end-of-sequence token")
    p.add_argument("--json", action="store_true",
                   help="print the run as JSON, with every step's report")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_generate)


# why a generation ended (Generation.stopped), as the summary line says it
STOPPED = {"eos": "stopped at the end-of-text token", "max_new": "made the --max-new tokens asked for",
           "context": "reached the model's context", "stopped": "stopped"}


def cmd_generate(args) -> int:
    from attnviz.engine.computing.generate import check_sampling, decode, generate

    check_sampling(args.temperature, args.top_p, args.max_new)  # before loading
    ids = parse_ids(args.ids) if args.ids is not None else None
    model = checkpoint_opt.at(load_for_generation(args.model, args.text, args.max_new), args)
    prediction_head(model, "generate")  # refuses a model that cannot predict, before running anything
    prompt = model.prepare(None if ids is not None else args.text, ids=ids)  # tokenised once
    with blas_for(len(prompt.ids)):
        gen = generate(model, prompt, max_new=args.max_new, temperature=args.temperature,
                       top_p=args.top_p, seed=args.seed, ignore_eos=args.ignore_eos)
    show_notice("generate", gen)
    text = decode(model, gen.prompt_ids + gen.new_ids)
    if args.json:
        print(strict_json({
            "model": model.name, **checkpoint_opt.entry(model), "prompt_ids": gen.prompt_ids,
            "new_ids": gen.new_ids,
            "new_tokens": [s.token for s in gen.steps], "text": text, "stopped": gen.stopped,
            "steps": [{"id": s.id, "token": s.token, "T": s.T, "kv_bytes": s.kv_bytes,
                       "kv_held_bytes": s.kv_held, "top": s.top_json()} for s in gen.steps],
        }, ensure_ascii=False, indent=1))
        return 0
    print(text)
    last = gen.steps[-1]
    n = len(gen.steps)
    # sizes as the Generate panel writes them, the exact count beside each
    print(f"-- {n} new token{'s' * (n != 1)}{checkpoint_opt.describe(model)}: {STOPPED.get(gen.stopped, gen.stopped)}; K and V at the last step: "
          f"{format_bytes(last.kv_bytes)} ({last.kv_bytes:,} bytes) for {tokens(last.T)}; held with their "
          f"arrays' room for the next positions: {format_bytes(last.kv_held)} ({last.kv_held:,} bytes)")
    return 0
