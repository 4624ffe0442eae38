"""attnviz: see multi-head attention on real trained weights."""

__version__ = "0.1.0"
