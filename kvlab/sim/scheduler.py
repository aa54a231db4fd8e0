"""Moved to ``kvlab.sim.simulation`` (Simulation, simulate, ORDERS) and ``kvlab.sim.cost`` (CostModel,
Budget, PEAK_FP16_FLOPS); this module re-exports them for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .cost import PEAK_FP16_FLOPS, Budget, CostModel
from .simulation import ORDERS, Simulation, simulate

__all__ = ["CostModel", "Budget", "simulate", "Simulation", "PEAK_FP16_FLOPS", "ORDERS"]
