"""kvlab.compute: the model, its KV tensors and the engine (torch)."""
