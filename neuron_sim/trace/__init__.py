"""Simulation results: records, timelines, summaries, Chrome/Perfetto export."""

from .summary import Result

__all__ = ["Result"]
