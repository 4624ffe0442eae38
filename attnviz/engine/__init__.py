"""The attnviz engine: pure NumPy tokenizing, loading, forward pass and attention weights. No Qt."""

from attnviz.engine.reading.config import ModelConfig, config_from_dict, read_config
from attnviz.engine.errors import AttnvizError, CalcError, InputError, ModelLoadError
from attnviz.engine.computing.load import load_folder, load_model
from attnviz.engine.computing.model import Model
from attnviz.engine.computing.run_result import RunResult
from attnviz.engine.reading.registry import (
    DEFAULT_MODEL, DEFAULT_TEXT, WINDOW_MODEL, ModelInfo, find_models, resolve,
)

__all__ = [
    "AttnvizError", "CalcError", "InputError", "ModelLoadError", "ModelConfig", "config_from_dict",
    "read_config", "Model", "RunResult", "load_folder", "DEFAULT_MODEL", "DEFAULT_TEXT", "WINDOW_MODEL", "ModelInfo",
    "find_models", "load_model", "resolve",
]
