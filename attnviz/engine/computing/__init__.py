"""Computing: the layers, the families' named steps, the forward pass and its trace, patterns, long texts, generation. No Qt."""
