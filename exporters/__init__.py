"""Target writers and loaders: StableHLO, LiteRT, ONNX."""
