"""Errors a user can trigger. Each message carries the numbers or names involved."""


class AttnvizError(Exception):
    """Base class: anything the user can cause (bad file, bad input, bad numbers)."""


class ModelLoadError(AttnvizError):
    """A model folder or file that cannot be read."""


class ModelFileChanged(ModelLoadError):
    """A file a model reads through a memory map, truncated or rewritten in place after the model
    was opened from it (engine/reading/mapped_files.py): nothing more is read from it."""


class BudgetTooSmall(ModelLoadError):
    """A chosen memory budget below one of the model's layers expanded to float32: the model
    cannot load within it (engine/reading/budget.py resolve_budget)."""


class InputError(AttnvizError):
    """Text or ids the model cannot take (too long, out of vocabulary...)."""


class TooLong(InputError):
    """A sequence over the positions a run may take (`limit`), asked for without truncation. Its
    message says only what anyone can do (shorten it): the command line adds --truncate for the
    commands that have it (cli.main)."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.limit = limit


class CalcError(AttnvizError, ValueError):
    """Calculator input that would give a wrong or meaningless number."""


class NoPrediction(AttnvizError):
    """A model that cannot predict the next token: an encoder, or a file without (or with broken)
    final norm or unembedding. Attention still works."""


class Cancelled(AttnvizError):
    """A computation stopped by its caller's check (a newer request replaced it, or Stop)."""
