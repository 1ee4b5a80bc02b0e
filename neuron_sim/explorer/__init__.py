"""Neuron Explorer-style views of simulated programs, torch-free: engine lanes for profiler traces,
the Summary (active %, HFU/MFU/MBU, DMA bytes by kind, peaks, verdict, recommendations), reading a
saved trace back, and matplotlib figures (plots.py, imported on demand)."""

from .lanes import LaneSpan, lane_spans
from .summary import DMA_KINDS, ENGINES, OpRecord, Summary, format_text, summarize, summarize_result
from .trace import (EXPLORER_KEY, compact_trace, device_events, is_lane_row, is_op_row, load_trace,
                    rebase_timestamps, summary_from_trace)

__all__ = ["LaneSpan", "lane_spans", "DMA_KINDS", "ENGINES", "OpRecord", "Summary", "format_text",
           "summarize", "summarize_result", "EXPLORER_KEY", "compact_trace", "device_events",
           "is_lane_row", "is_op_row", "load_trace", "rebase_timestamps", "summary_from_trace"]
