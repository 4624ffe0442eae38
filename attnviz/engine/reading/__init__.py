"""Reading models: weights (safetensors, GGUF), tokenizers, configs, the registry of models, training checkpoints. No Qt."""
