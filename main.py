"""Start attnviz from a source checkout: `python main.py` (same as the `attnviz` command)."""

from attnviz.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
