"""The window's machinery, no widgets: the one state (AppState and its sections), the one job runner and its kinds of job, remembered settings, the exception guard."""
