"""The boxed tables of the Neuron tools: '+---+' rules, two header lines, '| x |' rows."""

from __future__ import annotations


def render(headers, rows, groups=None) -> str:
    """headers: [(line1, line2)]; rows: lists of cells; groups: row indexes after which a rule
    is drawn (neuron-ls separates devices that have several process rows)."""
    cols = len(headers)
    widths = [max([len(h[0]), len(h[1])] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [rule]
    for line in (0, 1):
        out.append("|" + "|".join(f" {headers[i][line].center(widths[i])} " for i in range(cols)) + "|")
    out.append(rule)
    for k, r in enumerate(rows):
        out.append("|" + "|".join(f" {str(r[i]).ljust(widths[i])} " for i in range(cols)) + "|")
        if groups and k in groups and k != len(rows) - 1:
            out.append(rule)
    out.append(rule)
    return "\n".join(out)
