"""The desktop window (PySide6 + pyqtgraph); a view of attnviz.engine results."""
