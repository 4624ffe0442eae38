"""Exports never destroy what was there: every way a write can fail leaves the folder
exactly as it was (the same names, the same bytes, no temporary files), through the Qt-free writer
and `export_result` (the window's dialog: tests/ui/test_export_dialog.py; the command line:
tests/cli/test_export_atomic_cli.py); a successful export replaces the pair."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import errno  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from attnviz.engine.reading import file_write  # noqa: E402
from attnviz.figures import data as export_data  # noqa: E402
from attnviz.figures.data import ExportError, open_sidecar, write_atomic  # noqa: E402
from export_files import SENTENCE, SMALL, Calls, export, half_then, old_pair, snapshot  # noqa: E402

BIG = 3000  # px: an image of about 130 kB


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE)


def check_message(exc: BaseException, path: Path, reason: str) -> None:
    """The message names the path and the reason, in words (no "[Errno 21] ...")."""
    msg = str(exc)
    assert f"cannot write {path}: " in msg and reason in msg, msg
    assert "Errno" not in msg and "Error(" not in msg, msg


@pytest.fixture
def pair(qapp, run, tmp_path):
    """tmp_path with an earlier export fig.png + fig.png.json (head 0) and an unrelated file."""
    return old_pair(run, tmp_path)


# --- the case in the issue ----------------------------------------------------------------------

def test_sidecar_is_a_folder_keeps_the_old_image(pair, run):
    (pair / "fig.png.json").unlink()
    (pair / "fig.png.json").mkdir()
    before = snapshot(pair)
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1, width=BIG)
    check_message(err.value, pair / "fig.png.json", "it is a folder, not a file")
    assert snapshot(pair) == before


def test_sidecar_becomes_a_folder_between_check_and_move(pair, run, monkeypatch):
    """The folder appears after the writer looked (another program): the move fails with EISDIR
    after the image has landed, and the old image comes back."""
    before = snapshot(pair)
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).endswith("fig.png.json") and not str(src).endswith(".old"):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(dst))
        return real_replace(src, dst)
    monkeypatch.setattr(export_data.os, "replace", replace)
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    check_message(err.value, pair / "fig.png.json", "it is a folder, not a file")
    assert snapshot(pair) == before


def test_a_success_replaces_both_files_and_leaves_nothing_else(pair, run):
    before = snapshot(pair)
    mask = os.umask(0o027)
    try:
        written = export(run, pair / "fig.png", head=2, width=SMALL + 100)
    finally:
        os.umask(mask)
    assert written == [pair / "fig.png", pair / "fig.png.json"]
    after = snapshot(pair)
    assert sorted(after) == ["fig.png", "fig.png.json", "keep.txt"]
    assert after["fig.png"] != before["fig.png"] and after["fig.png.json"] != before["fig.png.json"]
    meta = open_sidecar(pair / "fig.png")
    assert (meta["head"], meta["width"]) == (2, SMALL + 100)
    # the files' mode is the umask's, as any file the user makes (not the temporary file's 0600)
    assert all((pair / n).stat().st_mode & 0o777 == 0o640 for n in ("fig.png", "fig.png.json"))


def test_a_success_without_hard_links_renames_the_old_files_aside(pair, run, monkeypatch):
    def no_links(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(export_data.os, "link", no_links)
    export(run, pair / "fig.png", head=3)
    assert sorted(snapshot(pair)) == ["fig.png", "fig.png.json", "keep.txt"]
    assert open_sidecar(pair / "fig.png")["head"] == 3


# --- the target, the sidecar or the folder is not what it should be -----------------------------

@pytest.mark.parametrize("name", ["fig.png", "fig.svg", "n.npy", "n.csv", "n.json"])
def test_target_is_a_folder(pair, run, name):
    (pair / name).unlink(missing_ok=True)  # fig.png: a folder where the old image was
    (pair / name).mkdir()
    (pair / name / "inside.txt").write_text("still here")
    before = snapshot(pair)
    with pytest.raises(ExportError) as err:
        export(run, pair / name, head=1)
    check_message(err.value, pair / name, "it is a folder, not a file")
    assert snapshot(pair) == before


@pytest.mark.parametrize("name", ["fig.png", "n.csv"])
def test_missing_folder_and_a_file_where_a_folder_should_be(pair, run, name):
    before = snapshot(pair)
    with pytest.raises(ExportError) as err:
        export(run, pair / "missing" / "deeper" / name)
    check_message(err.value, pair / "missing" / "deeper" / name,
                  f"folder {pair / 'missing' / 'deeper'} does not exist")
    with pytest.raises(ExportError) as err:
        export(run, pair / "keep.txt" / "sub" / name)
    check_message(err.value, pair / "keep.txt" / "sub" / name,
                  f"{pair / 'keep.txt'} is not a folder")
    assert snapshot(pair) == before


# --- an unwritable folder -----------------------------------------------------------------------

def _mount(*args) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    proc = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


def _umount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


@pytest.fixture
def read_only_pair(qapp, run, tmp_path):
    """A folder that refuses writes for real, holding an earlier export: a tmpfs remounted read-only
    as root, or chmod 0o500 for any other user (root ignores the mode bits)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        if not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)):
            pytest.skip("cannot mount a tmpfs here (not permitted)")
    (folder / "keep.txt").write_text("mine")
    export(run, folder / "fig.png", head=0)
    export(run, folder / "n.csv", head=0)
    try:
        if os.geteuid() == 0:
            if not _mount("-o", "remount,ro", str(folder)):
                pytest.skip("cannot remount the tmpfs read-only here")
        else:
            folder.chmod(0o500)
        yield folder
    finally:
        if os.geteuid() == 0:
            _umount(folder)
        else:
            folder.chmod(0o700)


@pytest.mark.parametrize("name", ["fig.png", "n.csv"])
def test_unwritable_folder_for_real(read_only_pair, run, name):
    before = snapshot(read_only_pair)
    with pytest.raises(ExportError) as err:
        export(run, read_only_pair / name, head=1)
    reason = "read-only file system" if os.geteuid() == 0 else "permission denied"
    check_message(err.value, read_only_pair / name, reason)
    assert snapshot(read_only_pair) == before


@pytest.mark.parametrize("n", [1, 2])
def test_unwritable_folder_emulated(pair, run, monkeypatch, n):
    """No temporary file can be made: for the image (n=1) or only for its sidecar (n=2)."""
    before = snapshot(pair)
    Calls(monkeypatch, file_write.tempfile, "mkstemp", n,
          PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    check_message(err.value, pair / ("fig.png", "fig.png.json")[n - 1], "permission denied")
    assert snapshot(pair) == before


def test_old_files_cannot_be_kept_aside(pair, run, monkeypatch):
    """Neither a hard link nor a rename is allowed for the sidecar: nothing moves."""
    before = snapshot(pair)
    Calls(monkeypatch, export_data.os, "link", 2, PermissionError(errno.EPERM, "Not permitted"))
    Calls(monkeypatch, export_data.os, "rename", 1,
          PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    check_message(err.value, pair / "fig.png.json", "permission denied")
    assert snapshot(pair) == before


# --- a full disk --------------------------------------------------------------------------------

@pytest.fixture
def small_disk(qapp, run, tmp_path):
    """A 64 kB tmpfs holding an earlier export (a 12 kB image, its sidecar, a small CSV)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)):
        pytest.skip("cannot mount a tmpfs here (not root, or not permitted)")
    try:
        export(run, folder / "fig.png", head=0, width=SMALL)
        export(run, folder / "n.csv", head=0)
        yield folder
    finally:
        _umount(folder)


@pytest.mark.parametrize("name,kw", [("fig.png", {"head": 1, "width": BIG}),
                                     ("n.csv", {"head": None, "scope": "all"})])
def test_full_disk_for_real(small_disk, run, name, kw):
    before = snapshot(small_disk)
    with pytest.raises(ExportError) as err:
        export(run, small_disk / name, **kw)
    check_message(err.value, small_disk / name, "no space left on device")
    assert snapshot(small_disk) == before


def test_full_disk_for_real_on_the_sidecar(small_disk, run):
    """The new image just fits; its sidecar does not."""
    from attnviz.figures.data import make_view
    from attnviz.figures.heatmaps import png_bytes

    view = make_view(run, model="m", scope="head", layer=0, head=1)
    image = len(png_bytes(view, SMALL + 40)[0])
    st = os.statvfs(small_disk)
    free = st.f_bavail * st.f_frsize - -(-image // st.f_frsize) * st.f_frsize
    (small_disk / "filler").write_bytes(b"\0" * free)
    assert os.statvfs(small_disk).f_bavail * st.f_frsize >= image
    before = snapshot(small_disk)
    with pytest.raises(ExportError) as err:
        export(run, small_disk / "fig.png", head=1, width=SMALL + 40)
    check_message(err.value, small_disk / "fig.png.json", "no space left on device")
    assert snapshot(small_disk) == before


@pytest.mark.parametrize("on_file,failing", [(1, "fig.png"), (2, "fig.png.json")])
def test_full_disk_emulated(pair, run, monkeypatch, on_file, failing):
    before = snapshot(pair)
    monkeypatch.setattr(export_data, "write_all",
                        half_then(OSError(errno.ENOSPC, "No space left on device"), on_file))
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    check_message(err.value, pair / failing, "no space left on device")
    assert snapshot(pair) == before


def test_flush_to_disk_fails(pair, run, monkeypatch):
    before = snapshot(pair)
    Calls(monkeypatch, export_data.os, "fsync", 2, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    check_message(err.value, pair / "fig.png.json", "input/output error")
    assert snapshot(pair) == before


# --- interrupted writes and failed moves --------------------------------------------------------

@pytest.mark.parametrize("on_file", [1, 2])
def test_interrupted_midway_through_a_write(pair, run, monkeypatch, on_file):
    before = snapshot(pair)
    monkeypatch.setattr(export_data, "write_all", half_then(KeyboardInterrupt(), on_file))
    with pytest.raises(KeyboardInterrupt):
        export(run, pair / "fig.png", head=1)
    assert snapshot(pair) == before


@pytest.mark.parametrize("links", [True, False], ids=["hard-links", "no-hard-links"])
@pytest.mark.parametrize("exc", [PermissionError(errno.EACCES, "Permission denied"),
                                 KeyboardInterrupt()], ids=["oserror", "interrupt"])
@pytest.mark.parametrize("n", [1, 2])
def test_a_failed_move_puts_the_old_pair_back(pair, run, monkeypatch, n, exc, links):
    """The image's move (n=1) or the sidecar's, after the new image has landed (n=2), fails."""
    if not links:
        def no_links(*args, **kwargs):
            raise OSError(errno.EPERM, "Operation not permitted")
        monkeypatch.setattr(export_data.os, "link", no_links)
    before = snapshot(pair)
    Calls(monkeypatch, export_data.os, "replace", n, exc)
    with pytest.raises(ExportError if isinstance(exc, OSError) else KeyboardInterrupt) as err:
        export(run, pair / "fig.png", head=1)
    if isinstance(exc, OSError):
        check_message(err.value, pair / ("fig.png", "fig.png.json")[n - 1], "permission denied")
    assert snapshot(pair) == before


def test_a_failed_move_with_no_old_pair_leaves_nothing(qapp, run, tmp_path, monkeypatch):
    (tmp_path / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    Calls(monkeypatch, export_data.os, "replace", 2, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(ExportError, match=r"fig\.svg\.json: input/output error"):
        export(run, tmp_path / "fig.svg", head=1)
    assert snapshot(tmp_path) == before


def test_a_failed_restore_is_said_and_the_old_file_kept(pair, run, monkeypatch):
    """If even putting the old image back fails, the message says so and where the old file is."""
    old_image = (pair / "fig.png").read_bytes()
    real_replace = os.replace

    def replace(src, dst):
        if str(src).endswith(".old") or str(dst).endswith(".json"):
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst)
    monkeypatch.setattr(export_data.os, "replace", replace)
    with pytest.raises(ExportError) as err:
        export(run, pair / "fig.png", head=1)
    msg = str(err.value)
    assert "fig.png.json: input/output error" in msg and "could not be restored" in msg, msg
    kept = Path(msg.split("the old file is kept as ")[1].split(";")[0])
    assert kept.parent == pair and kept.read_bytes() == old_image


def test_several_number_files_in_one_transaction(tmp_path, monkeypatch):
    """Data files written together land together or not at all."""
    names = ["a.npy", "a.csv", "a.json"]
    for name in names:
        (tmp_path / name).write_bytes(b"old " + name.encode())
    before = snapshot(tmp_path)
    for n in (1, 2, 3):
        with monkeypatch.context() as m:
            Calls(m, export_data.os, "replace", n, OSError(errno.EIO, "Input/output error"))
            with pytest.raises(ExportError, match=rf"{names[n - 1]}: input/output error"):
                write_atomic([(tmp_path / name, b"new " + name.encode()) for name in names])
        assert snapshot(tmp_path) == before
    write_atomic([(tmp_path / name, b"new " + name.encode()) for name in names])
    assert snapshot(tmp_path) == {name: b"new " + name.encode() for name in names}
