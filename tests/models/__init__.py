"""Model-family tests: every zoo model through every ready target, compared with PyTorch."""
