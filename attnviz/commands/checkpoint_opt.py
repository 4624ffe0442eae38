"""`--checkpoint I` for the commands that run a model: which training checkpoint to run."""

from __future__ import annotations

import argparse

from attnviz.engine.reading.checkpoints import checkpoint_record, model_at


def checkpoint_index(text: str) -> int:
    """An argparse `type`: an integer (negative counts from the end); range is checked at load."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def add(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", type=checkpoint_index, metavar="I",
                   help="training checkpoint of a model that has them (attnviz models: CHECKPOINTS): "
                        "0 is the first, -1 the last (default: the last)")


def describe(model) -> str:
    """' at checkpoint I of N (step S)' for a model with checkpoints, else ''."""
    rec = checkpoint_record(model)
    return "" if rec is None else f" at checkpoint {rec['index']} of 0..{rec['of'] - 1} (step {rec['step']})"


def at(model, args):
    """`model` (loaded from --model) at --checkpoint (out of range: InputError, exit 2)."""
    return model_at(model, getattr(args, "checkpoint", None))
