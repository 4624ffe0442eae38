"""The Corpus panel's jobs on the app's one runner (ui/machinery/worker.Worker), so the panel never
calls the runner itself: a scan folder read (DuckDB over its Parquet files, then the heads'
distances) and the loaded model's files hashed, each on a thread of its own with the newest of its
kind winning, and a load of the scan's model. What is read and hashed is ui/panels/corpus_scan.py's."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject

from attnviz.ui.machinery.runner import THREAD

READ_KIND, HASH_KIND = "corpus", "corpus-model-hash"


class CorpusJobs(QObject):
    def __init__(self, worker, parent: QObject | None = None):
        super().__init__(parent if parent is not None else worker)
        self.worker = worker

    def read(self, path, model, known_sha: str | None, on_done: Callable) -> None:
        """Read the scan at `path`, and hash `model`'s files unless `known_sha` is given:
        on_done(path, (ScanView, (model, sha256 or None)), error) on the main thread."""
        from attnviz.ui.panels.corpus_scan import files_hash, read_scan

        def job():
            scan = read_scan(path)
            sha = known_sha
            if sha is None and model is not None:
                try:
                    sha = files_hash(model)
                except OSError:  # the panel hashes it again and says why it cannot
                    sha = None
            return scan, (model, sha)

        self.worker.submit(READ_KIND, job, on_done, str(path), THREAD)

    def hash_model(self, model, on_done: Callable) -> None:
        """The sha256 of `model`'s files: on_done(model, sha256, error); a hash of the same model
        under way is not started again."""
        from attnviz.ui.panels.corpus_scan import files_hash

        job = self.worker.running(HASH_KIND)
        if job is not None and job.request is model:
            return
        self.worker.submit(HASH_KIND, lambda: files_hash(model), on_done, model, THREAD)

    def load(self, source: str) -> None:
        """Load the scan's model (the window's load: the current model stays meanwhile)."""
        self.worker.load(source)
