"""StableHLO export: jax.export of the lowered program, saved and reloadable without PyTorch."""

from exporters.stablehlo.export import StableHLOArtifact, build
from exporters.stablehlo.load import LoadedStableHLO, load

__all__ = ["StableHLOArtifact", "LoadedStableHLO", "build", "load"]
