"""Command line: `attnviz` with no command opens the window; subcommands use the engine."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# Each module has `register(subparsers)`, which adds its commands and sets `func(args) -> int`.
COMMAND_MODULES = (
    "attnviz.commands.engine_cmds",  # models, attention
    "attnviz.commands.calc_cmd",  # calc
    "attnviz.commands.heads_cmd",  # heads, find
    "attnviz.commands.export_cmd",  # export (renders offscreen with Qt)
)


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes print one line (and how to get help), not the whole usage block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def no_display_reason() -> str | None:
    """Why the window cannot open here, or None. Qt would otherwise abort the process."""
    if os.environ.get("QT_QPA_PLATFORM") or not sys.platform.startswith("linux"):
        return None
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    return ("no display to open the window on (DISPLAY is not set); run it from a desktop session, "
            "or use the command line, e.g. `attnviz export --out heads.png` (attnviz --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="attnviz",
        description="See multi-head attention. With no command, opens the desktop window.",
    )
    parser.add_argument("--model", help="model to open in the window (name or folder)")
    parser.add_argument("--text", help="sentence to open the window with")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # command not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from attnviz.engine.errors import AttnvizError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        reason = no_display_reason()
        if reason:
            print(f"attnviz: error: {reason}", file=sys.stderr)
            return 2
        from attnviz.ui.app import run_app

        return run_app(model=args.model, text=args.text)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (AttnvizError, ValueError, OSError) as exc:
        print(f"attnviz {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
