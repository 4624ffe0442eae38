"""Command line: `attnviz` with no command opens the window; subcommands use the engine."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import traceback

from attnviz import __version__
from attnviz.commands import checkpoint_opt

# Each module has `register(subparsers)`, which adds its commands and sets `func(args) -> int`.
# A command imports only its own module (a command's start-up does not wait for the others'
# imports); --help and a missing or unknown command import them all.
COMMAND_MODULES = (
    "engine_cmds",  # models, attention
    "calc_cmd",  # calc
    "heads_cmd",  # heads, find
    "predict_cmd",  # predict, ablation-scan
    "patch_cmd",  # patch
    "compare_cmd",  # compare
    "generate_cmd",  # generate
    "circuits_cmd",  # qk-attribution, circuits
    "export_cmd",  # export (renders offscreen with Qt, imported only when it runs)
    "scan_cmd",  # scan, scan-report (Dask, pyarrow and DuckDB imported only when they run)
    "quantize_cmd",  # quantize
)
COMMANDS = {"models": "engine_cmds", "attention": "engine_cmds", "calc": "calc_cmd",
            "heads": "heads_cmd", "find": "heads_cmd", "predict": "predict_cmd",
            "ablation-scan": "predict_cmd", "patch": "patch_cmd", "compare": "compare_cmd",
            "generate": "generate_cmd",
            "qk-attribution": "circuits_cmd", "circuits": "circuits_cmd", "export": "export_cmd",
            "scan": "scan_cmd", "scan-report": "scan_cmd",
            "quantize": "quantize_cmd"}  # (a command not here: every module)


def command_module(name: str):
    """One of COMMAND_MODULES, imported now (plainly: an ImportError in it is a bug to see)."""
    if name == "engine_cmds":
        from attnviz.commands import engine_cmds as module
    elif name == "calc_cmd":
        from attnviz.commands import calc_cmd as module
    elif name == "heads_cmd":
        from attnviz.commands import heads_cmd as module
    elif name == "predict_cmd":
        from attnviz.commands import predict_cmd as module
    elif name == "patch_cmd":
        from attnviz.commands import patch_cmd as module
    elif name == "compare_cmd":
        from attnviz.commands import compare_cmd as module
    elif name == "generate_cmd":
        from attnviz.commands import generate_cmd as module
    elif name == "circuits_cmd":
        from attnviz.commands import circuits_cmd as module
    elif name == "export_cmd":
        from attnviz.commands import export_cmd as module
    elif name == "scan_cmd":
        from attnviz.commands import scan_cmd as module
    elif name == "quantize_cmd":
        from attnviz.commands import quantize_cmd as module
    else:
        raise KeyError(name)
    return module


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes print one line (and how to get help), not the whole usage block. build_parser
    sets `commands`: each command's own parser by name (its options, defaults and --help)."""

    commands: dict[str, argparse.ArgumentParser] = {}

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


def build_parser(argv: list[str] | None = None) -> OneLineParser:
    """The command line's parser; with `argv`, one whose only command is the one argv names (when
    it names one), so that only that command's module is imported."""
    parser = OneLineParser(
        prog="attnviz",
        description="See multi-head attention. With no command, opens the desktop window.",
    )
    parser.add_argument("--model", dest="window_model",
                        help="model to open in the window (name, folder or .gguf file)")
    parser.add_argument("--text", dest="window_text", help="sentence to open the window with")
    checkpoint_opt.add_memory_budget(parser, default=None)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    desktop = parser.add_mutually_exclusive_group()
    desktop.add_argument("--install-desktop", action="store_true",
                         help="add attnviz to the desktop's application menu (a .desktop entry and "
                              "its icon under $XDG_DATA_HOME, default ~/.local/share)")
    desktop.add_argument("--uninstall-desktop", action="store_true",
                         help="remove that menu entry and icon")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = COMMANDS.get(named_command(parser, argv)) if argv is not None else None
    for name in (named,) if named else COMMAND_MODULES:
        command_module(name).register(sub)
    parser.commands = dict(sub.choices)
    return parser


def named_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The command argv names: its first word that is neither an option nor an option's value."""
    takes_value = {o for a in parser._actions if a.option_strings and a.nargs != 0
                   for o in a.option_strings}
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help", "--"):
            return None
        if word.startswith("-"):
            if word in takes_value:
                next(words, None)
            continue
        return word
    return None


def one_line(message: object) -> str:
    """A message as one line: a multi-line exception text would read as several errors."""
    text = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return text or type(message).__name__


def truncate_hint(exc: Exception, args) -> str:
    """What a command with --truncate adds to a text too long for it (TooLong says only "shorten
    it": the window, patch, qk-attribution and compare have no such option)."""
    from attnviz.engine.errors import TooLong

    if isinstance(exc, TooLong) and getattr(args, "truncate", None) is False:
        return f", or give --truncate to cut it to {exc.limit} tokens"
    return ""


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done; 2 misuse or an input or file attnviz refuses (one line on stderr);
    1 an internal error (one line; -v logs the traceback); 130 interrupted; 141 output pipe closed."""
    from attnviz.engine.errors import AttnvizError

    own_process = argv is None  # (a caller passing argv, a test, keeps its process as it is)
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # (named against the command they were given to, with its own --help)
        own = parser.commands.get(args.command) if args.command else None
        (own or parser).error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    prog = "attnviz" if args.command is None else f"attnviz {args.command}"
    if args.install_desktop or args.uninstall_desktop:
        flag = "--install-desktop" if args.install_desktop else "--uninstall-desktop"
        if args.command is not None or args.window_model is not None or args.window_text is not None:
            parser.error(f"{flag} takes no command, --model or --text")
    if args.command is not None:
        given = [f for f, v in (("--model", args.window_model), ("--text", args.window_text))
                 if v is not None]
        if given:  # argparse would let the command's own defaults silently win
            parser.error(f"{' and '.join(given)} before the command open{'s' if len(given) == 1 else ''} "
                         f"the window; put {'it' if len(given) == 1 else 'them'} after it: "
                         f"attnviz {args.command} {given[0]} ...")
    if args.memory_budget is not None:  # before any model loads (the window's setting yields)
        from attnviz.engine.reading.memory_budget import set_memory_budget

        set_memory_budget(args.memory_budget, command_line=True)
    try:
        if args.install_desktop or args.uninstall_desktop:
            from attnviz.commands import desktop

            return desktop.install() if args.install_desktop else desktop.uninstall()
        if args.command is None:
            return open_window(args)
        import numpy as np

        if own_process:
            one_shot_process(args.command)
        # a broken model's overflow warnings would add lines: the engine refuses its NaN itself
        with np.errstate(all="warn" if args.verbose else "ignore"):
            return int(args.func(args) or 0)
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (AttnvizError, ValueError, OSError) as exc:
        print(f"{prog}: error: {one_line(exc)}{truncate_hint(exc, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if args.verbose:
            traceback.print_exc()
        hint = "" if args.verbose else " (rerun with -v for the traceback)"
        print(f"{prog}: internal error: {type(exc).__name__}: {one_line(exc)}{hint}", file=sys.stderr)
        return 1


LONG_RUNNING = {"scan"}  # commands whose workers run the same layers over many texts, as the window


def one_shot_process(command: str) -> None:
    """Set up a process that runs `command` and exits: large arrays get small pages where the host
    takes back free memory (engine/reading/pages.py: a command fills its layers once; not for
    LONG_RUNNING ones) and come from freed ones where they can (pages.reuse_freed_memory), and what
    the imports made is left out of the garbage collector's later passes (it lives until exit; a
    large vocabulary's build would otherwise walk it again)."""
    if command not in LONG_RUNNING:
        from attnviz.engine.reading.pages import reuse_freed_memory, small_pages_where_host_reclaims

        small_pages_where_host_reclaims()
        reuse_freed_memory()
    gc.freeze()


def open_window(args) -> int:
    """The launcher: its own arguments are checked before any window opens."""
    from attnviz.engine.computing.text_input import clean_text
    from attnviz.engine.reading.registry import resolve

    text = None
    if args.window_text is not None:
        text, notice = clean_text(args.window_text)  # Qt would drop lone surrogates silently
        if notice:
            print(f"attnviz: note: --text: {notice}", file=sys.stderr)
    if args.window_model is not None:
        resolve(args.window_model)  # an unknown name or a pickle file: one line, no window
    reason = no_display_reason()
    if reason:
        print(f"attnviz: error: {reason}", file=sys.stderr)
        return 2
    from attnviz.ui.app import run_app

    return run_app(model=args.window_model, text=text)
