"""`--checkpoint I` for the commands that run a model: which training checkpoint to run."""

from __future__ import annotations

import argparse

from attnviz.engine.computing.checkpoints import checkpoint_entry, checkpoint_record, checkpoint_words, model_at


def checkpoint_index(text: str) -> int:
    """An argparse `type`: an integer (negative counts from the end); range is checked at load."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def memory_budget(text: str) -> int | None:
    """An argparse `type`: a size such as 2G or 512M (bytes), or auto (None); a bare number below
    1 MiB is refused, as the window's dialog does (parse_typed_budget)."""
    from attnviz.engine.errors import InputError
    from attnviz.engine.reading.typed_budget import parse_typed_budget

    try:
        return parse_typed_budget(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MEMORY_BUDGET_HELP = ("float32 layers to keep expanded, e.g. 2G, 512M (K, M, G: powers of 1024), or "
                      "auto (default: the memory available, less 1 GiB and what the model needs "
                      "besides its layers); a bigger model expands the others from its file as "
                      "they run. The results are the same")


def add_memory_budget(p: argparse.ArgumentParser, default=argparse.SUPPRESS) -> None:
    """--memory-budget SIZE (engine/reading/budget.py); cli.main applies it before any load."""
    p.add_argument("--memory-budget", type=memory_budget, metavar="SIZE", default=default,
                   help=MEMORY_BUDGET_HELP)


def add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=checkpoint_index, metavar="I",
                   help="training checkpoint of a model that has them (attnviz models: CHECKPOINTS): "
                        "0 is the first, -1 the last (default: the last)")
    add_memory_budget(p)


def describe(model) -> str:
    """' at checkpoint I of N (step S)' for a model with checkpoints, else ''."""
    return checkpoint_words(model)


def entry(model) -> dict:
    """{"checkpoint": {index, step, of}} for a --json document of a model with checkpoints, else {}."""
    return checkpoint_entry(checkpoint_record(model))


def at(model, args):
    """`model` (loaded from --model) at --checkpoint (out of range: InputError, exit 2)."""
    from attnviz.engine.errors import InputError
    from attnviz.engine.computing.checkpoints import load_checkpoints
    from attnviz.engine.reading.registry import TOY_MODEL

    try:
        return model_at(model, getattr(args, "checkpoint", None))
    except InputError as exc:
        if load_checkpoints(model) is not None:
            raise
        raise InputError(f"{exc}; {TOY_MODEL} has them: --model {TOY_MODEL}") from None
