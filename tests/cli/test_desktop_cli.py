"""`attnviz --version`, and the desktop menu entry: `--install-desktop` writes a valid freedesktop
.desktop file and the project's SVG icon under XDG_DATA_HOME, `--uninstall-desktop` removes them."""

import configparser
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import attnviz


def test_version(cli, capsys):
    with pytest.raises(SystemExit) as exc:  # argparse's --version
        cli("--version")
    out = capsys.readouterr().out
    assert exc.value.code == 0 and out.strip() == f"attnviz {attnviz.__version__}"
    proc = subprocess.run([sys.executable, "-m", "attnviz", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == f"attnviz {attnviz.__version__}"


def test_install_and_uninstall_desktop_entry(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    rc, out, err = cli("--install-desktop")
    assert rc == 0, err
    entry = tmp_path / "share" / "applications" / "attnviz.desktop"
    icon = tmp_path / "share" / "icons" / "hicolor" / "scalable" / "apps" / "attnviz.svg"
    assert str(entry) in out and str(icon) in out
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str
    cp.read(entry, encoding="utf-8")
    d = cp["Desktop Entry"]
    assert d["Type"] == "Application" and d["Name"] == "attnviz" and d["Terminal"] == "false"
    assert d["Icon"] == str(icon) and d["Categories"].endswith(";")
    # Exec starts this installation's window: its attnviz script (or python -m attnviz)
    program = d["Exec"].split()[0].strip('"')
    assert os.path.isabs(program) and os.access(program, os.X_OK)
    assert d["TryExec"] == program
    # the icon is the project's own SVG, and it draws
    root = ET.parse(icon).getroot()
    assert root.tag.endswith("svg") and root.get("viewBox") == "0 0 128 128"
    assert len(root.findall("{http://www.w3.org/2000/svg}rect")) == 26  # the tile and 5 x 5 cells
    # again: the same files, replaced
    assert cli("--install-desktop")[0] == 0
    rc, out, _ = cli("--uninstall-desktop")
    assert rc == 0 and not entry.exists() and not icon.exists() and "removed" in out
    rc, out, _ = cli("--uninstall-desktop")
    assert rc == 0 and "no menu entry" in out


def test_desktop_flags_take_no_command(cli, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exc:  # argparse's usage errors
        cli("--install-desktop", "calc", "--preset", "gpt2")
    assert exc.value.code == 2 and "--install-desktop takes no command" in capsys.readouterr().err
    assert not (tmp_path / "applications").exists()
    with pytest.raises(SystemExit) as exc:
        cli("--install-desktop", "--uninstall-desktop")
    assert exc.value.code == 2


def test_the_icon_renders(qapp):
    pytest.importorskip("PySide6.QtSvg")
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    from attnviz.commands.desktop import icon_source

    renderer = QSvgRenderer(str(icon_source()))
    assert renderer.isValid()
    img = QImage(64, 64, QImage.Format.Format_ARGB32)
    img.fill(0)
    p = QPainter(img)
    renderer.render(p)
    p.end()
    colours = {img.pixelColor(x, y).name() for x in range(0, 64, 4) for y in range(0, 64, 4)}
    assert len(colours) >= 4  # the dark tile and several viridis cells
