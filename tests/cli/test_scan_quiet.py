"""`attnviz scan` on its own LocalCluster: a successful scan prints its progress and its summary
only (Dask's own lines with --verbose), the cluster shuts down without a traceback, and every
socket the cluster's processes listen on is on the loopback interface, the dashboard included."""

import re
import subprocess
import sys

import pytest

pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

MODEL = "attnviz-textbook"
PROGRESS = re.compile(r"^\d+/\d+ texts \(\d+%\)  [\d.]+ texts/s  \d+ tokens/s  ETA [\d:?]+$")
LOOPBACK = {"127.0.0.1", "::1"}


def _scan(tmp_path, *extra):
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat\nalpha beta gamma alpha beta\nhello world\n",
                      encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "attnviz", *extra, "scan", "--model", MODEL, "--corpus", str(corpus),
         "--out", str(tmp_path / "scan"), "--workers", "2", "--batch", "1"],
        capture_output=True, text=True, timeout=300)


def test_a_successful_scan_prints_its_progress_and_summary_only(tmp_path):
    proc = _scan(tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "no progress line"
    assert [line for line in lines if not PROGRESS.match(line)] == [], proc.stderr
    assert lines[-1].startswith("3/3 texts (100%)")
    out = proc.stdout.splitlines()
    assert out[0].startswith("scanning 3 texts of ") and out[-1].startswith("summary: attnviz scan-report")


def test_verbose_shows_dasks_own_lines_and_the_cluster_still_closes_cleanly(tmp_path):
    proc = _scan(tmp_path, "--verbose")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^INFO distributed\.scheduler: ", proc.stderr, re.M), proc.stderr
    # Dask itself logs, at INFO, a scheduler's send to a worker that has already closed at shutdown
    # ("Batched Comm Closed", with its traceback): its own message, shown only with --verbose
    told = re.sub(r"^INFO distributed\.batched: Batched Comm Closed.*?^distributed\.comm\.core\."
                  r"CommClosedError[^\n]*\n", "", proc.stderr, flags=re.M | re.S)
    assert "Traceback" not in told and "CommClosedError" not in told, proc.stderr
    assert not re.search(r"^(WARNING|ERROR|CRITICAL) ", proc.stderr, re.M), proc.stderr


def _listening(process) -> list[tuple[int, str, int]]:
    out = []
    for p in [process, *process.children(recursive=True)]:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        out += [(p.pid, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def test_the_scans_local_cluster_listens_on_loopback_only_the_dashboard_included():
    from dask.distributed import Client

    from attnviz.corpus.scan import local_cluster

    me = psutil.Process()
    before = {(ip, port) for _, ip, port in _listening(me)}
    cluster = local_cluster(2)
    try:
        with Client(cluster) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            sockets = [s for s in _listening(me) if s[1:] not in before]
            pids = {pid for pid, _, _ in sockets}
            assert len(pids) == 3, sockets  # the scheduler's process and two workers
            dashboard = cluster.scheduler.http_server.port
            assert any(port == dashboard for _, _, port in sockets), (dashboard, sockets)
            assert [s for s in sockets if s[1] not in LOOPBACK] == []
    finally:
        cluster.close()


def test_a_workers_heartbeat_error_is_left_out_only_while_it_closes(caplog):
    """The error a worker logs when its heartbeat meets its own closing (a shutdown race on a
    loaded machine) is dropped; the same error from a running worker still shows."""
    import logging
    import types

    from attnviz.corpus.scan import _CLOSING_HEARTBEAT, quiet_closing_heartbeats

    worker = types.SimpleNamespace(status=types.SimpleNamespace(name="running"))
    logger = logging.getLogger("distributed.worker")
    before = list(logger.filters)
    quiet_closing_heartbeats(worker)
    try:
        with caplog.at_level(logging.ERROR, logger="distributed.worker"):
            logger.error(_CLOSING_HEARTBEAT + ".")
            worker.status.name = "closing"
            logger.error(_CLOSING_HEARTBEAT + ".")
            logger.error("another error while closing")
        assert [r.getMessage() for r in caplog.records] == [_CLOSING_HEARTBEAT + ".", "another error while closing"]
    finally:
        logger.filters[:] = before
