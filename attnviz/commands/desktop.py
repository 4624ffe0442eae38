"""`attnviz --install-desktop` / `--uninstall-desktop`: a freedesktop.org menu entry for the window.

Writes `$XDG_DATA_HOME/applications/attnviz.desktop` (default `~/.local/share/applications`) and
the project's icon (`resources/attnviz.svg`) to `$XDG_DATA_HOME/icons/hicolor/scalable/apps/`.
The entry starts the `attnviz` command this Python runs (the checkout's `.venv`, a pipx install):
installed again after moving it, the entry follows. Nothing outside XDG_DATA_HOME is touched.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import sys
from pathlib import Path

APP_ID = "attnviz"
ICON_NAME = "attnviz.svg"


def data_home() -> Path:
    """$XDG_DATA_HOME, or ~/.local/share where it is unset or not absolute (the spec's rule)."""
    value = os.environ.get("XDG_DATA_HOME", "")
    return Path(value) if value and os.path.isabs(value) else Path.home() / ".local" / "share"


def entry_path() -> Path:
    return data_home() / "applications" / f"{APP_ID}.desktop"


def icon_path() -> Path:
    return data_home() / "icons" / "hicolor" / "scalable" / "apps" / ICON_NAME


def icon_source() -> Path:
    """resources/attnviz.svg: beside the package in a checkout, inside it once installed."""
    checkout = Path(__file__).resolve().parents[2] / "resources" / ICON_NAME
    if checkout.is_file():
        return checkout
    return Path(str(importlib.resources.files("attnviz.resources") / ICON_NAME))


def _quote(arg: str) -> str:
    """One Exec argument, quoted as the Desktop Entry spec asks where it has reserved characters."""
    if not any(c in arg for c in ' \t\n"\'\\><~|&;$*?#()`='):
        return arg
    return '"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"'


def launch_command() -> list[str]:
    """The command that opens the window with this installation: its `attnviz` script, else
    `python -m attnviz` with this interpreter."""
    script = Path(sys.executable).parent / "attnviz"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "attnviz"]


def desktop_entry(command: list[str], icon: Path) -> str:
    from attnviz import __version__

    exec_line = " ".join(_quote(a).replace("%", "%%") for a in command)
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.5",
        "Name=attnviz",
        "GenericName=Attention viewer",
        "Comment=See the multi-head attention of real transformer models as you type",
        f"Exec={exec_line}",
        f"TryExec={command[0]}",
        f"Icon={icon}",
        "Terminal=false",
        "Categories=Education;Science;Development;",
        "Keywords=attention;transformer;heatmap;LLM;",
        f"StartupWMClass={APP_ID}",
        f"X-attnviz-Version={__version__}",
        "",
    ])


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def install() -> int:
    entry, icon = entry_path(), icon_path()
    _write(icon, icon_source().read_bytes())
    _write(entry, desktop_entry(launch_command(), icon).encode("utf-8"))
    print(f"attnviz: menu entry {entry}")
    print(f"attnviz: icon {icon}")
    if shutil.which("update-desktop-database"):
        import subprocess

        subprocess.run(["update-desktop-database", "-q", str(entry.parent)], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


def uninstall() -> int:
    removed = [p for p in (entry_path(), icon_path()) if p.is_file()]
    for p in removed:
        p.unlink()
        print(f"attnviz: removed {p}")
    if not removed:
        print(f"attnviz: no menu entry to remove ({entry_path()} does not exist)")
    return 0
