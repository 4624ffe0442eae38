"""Write a corpus for `attnviz scan` that needs no download: paragraphs of the Python standard
library's docstrings (the text the toy model was trained on; PSF License 2.0).

    python scripts/stdlib_corpus.py --out stdlib.txt --max 2000
    attnviz scan --model all-MiniLM-L6-v2 --corpus stdlib.txt --out stdlib-scan

Each paragraph of a module, class or function docstring (blank-line separated) becomes one line,
its whitespace joined to single spaces; paragraphs are separated by a blank line too, so the file
reads the same with --split lines and --split paragraphs. Doctest examples (>>>), tables, lists, code
(under 80% plain words, or no closing full stop) and paragraphs outside --min-words..--max-words
are left out. Files are read in sorted order: the same
Python gives the same corpus.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import sysconfig
from pathlib import Path

SKIP = {"test", "tests", "idlelib", "turtledemo", "site-packages", "lib2to3", "__pycache__"}
_CODEISH = re.compile(r"^\s*(>>>|\.\.\.|[-=*+|]{3,}|[-*+] |\d+\. |:param|@)", re.M)


def docstrings(lib: Path):
    """Every module, class and function docstring of the stdlib at `lib`, file by file, sorted."""
    for path in sorted(lib.rglob("*.py")):
        rel = path.relative_to(lib)
        if SKIP & set(rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    yield doc


def paragraphs(doc: str, min_words: int, max_words: int):
    for para in re.split(r"\n\s*\n", doc):
        if _CODEISH.search(para) or not para.isascii():
            continue
        text = " ".join(para.split())
        words = text.split()
        prose = sum(w.strip(".,;:()'\"").isalpha() for w in words)
        if min_words <= len(words) <= max_words and text.endswith(".") and prose >= 0.8 * len(words):
            yield text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the .txt corpus to write")
    ap.add_argument("--max", type=int, default=2000, help="paragraphs at most (default: %(default)s)")
    ap.add_argument("--min-words", type=int, default=8)
    ap.add_argument("--max-words", type=int, default=150)
    args = ap.parse_args(argv)
    lib = Path(sysconfig.get_paths()["stdlib"])
    seen, out = set(), []
    for doc in docstrings(lib):
        for p in paragraphs(doc, args.min_words, args.max_words):
            if p not in seen:  # the same paragraph in many docstrings counts once
                seen.add(p)
                out.append(p)
        if len(out) >= args.max:
            break
    out = out[:args.max]
    Path(args.out).write_text("\n\n".join(out) + "\n", encoding="utf-8")
    words = sum(len(p.split()) for p in out)
    print(f"{args.out}: {len(out)} paragraphs, {words} words, from the docstrings of Python "
          f"{sys.version.split()[0]}'s standard library ({lib}); PSF License 2.0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
