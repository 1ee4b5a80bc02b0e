"""Where Dynamo splits a function into several graphs, in the user's terms.

Pieces between graphs run eagerly (each op charged as eager); each graph runs as one launch.
`explain_graph_breaks(fn, *args)` lists the breaks with the user line that caused them;
`get_dynamo_metrics()[i].source` gives the lines each compiled graph covers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GraphBreak:
    reason: str
    location: str        # "file.py:LINE in fn" of the innermost user frame, "" if unknown

    def __str__(self) -> str:
        return f"{self.location}: {self.reason}" if self.location else self.reason


@dataclass(frozen=True)
class BreakReport:
    graph_count: int
    breaks: tuple

    def __str__(self) -> str:
        head = f"{self.graph_count} graph(s), {len(self.breaks)} graph break(s)"
        return "\n".join([head] + [f"  {b}" for b in self.breaks])


def explain_graph_breaks(fn, *args, **kwargs) -> BreakReport:
    """Traces `fn(*args, **kwargs)` with Dynamo (no compilation) and reports its graph breaks."""
    import torch._dynamo
    out = torch._dynamo.explain(fn)(*args, **kwargs)
    breaks = []
    for r in out.break_reasons:
        stack = getattr(r, "user_stack", None) or []
        where = ""
        if stack:
            f = stack[-1]
            where = f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"
        reason = str(getattr(r, "reason", r)).strip().splitlines()[0]
        breaks.append(GraphBreak(reason, where))
    return BreakReport(out.graph_count, tuple(breaks))
