"""Loop iterations written in bulk: `repeat.synthesize` (neuron_sim/program/repeat.py) in one
pass over the output, instead of ~25 NumPy calls and their temporaries per loop (most loops write
a few hundred rows, where those calls are the cost). `repeat.synthesize_reference` is the
specification: iteration k is the sample of its phase j = (k - first) % period, every position
moved by sh = k - first - j iterations' steps. `_same_step` is repeat.py's test that one
iteration's positions moved from another's by given steps (`_same_step_reference`)."""

from __future__ import annotations

import numpy as np
from numba import njit

from . import drop_stale_caches, without_refcounting


@njit(cache=True, **without_refcounting())
def _synthesize(start, stop, first, period, rid, cls, write, row_x, row_acc, base, track, box,
                pst, off, x_idx, d_box, d_pst, d_off, x_moves, r, x, a, o_rid, o_cls, o_write,
                o_x_ptr, o_acc_ptr, o_base, o_track, o_box, o_pst, o_off, o_x_idx):
    """Write iterations start..stop-1 at rows r.., explicit deps x.., accesses a.. of the o_*
    columns (template arrays as repeat.Template holds them)."""
    L, nx, na = rid.shape[0], x_idx.shape[1], track.shape[1]
    for k in range(start, stop):
        j = (k - first) % period
        sh = k - first - j
        it = k - start
        r0, x0, a0 = r + it * L, x + it * nx, a + it * na
        cx, ca = x0, a0
        for l in range(L):
            o_rid[r0 + l] = rid[l]
            o_cls[r0 + l] = cls[l]
            o_base[r0 + l] = base[j, l]
            cx += row_x[l]
            ca += row_acc[l]
            o_x_ptr[r0 + l + 1] = cx
            o_acc_ptr[r0 + l + 1] = ca
        step = sh * L
        for q in range(nx):
            o_x_idx[x0 + q] = step * x_moves[q] + x_idx[j, q]
        for q in range(na):
            o_write[a0 + q] = write[q]
            o_track[a0 + q] = track[j, q]
            for c in range(4):
                o_box[a0 + q, c] = sh * d_box[q, c] + box[j, q, c]
            o_pst[a0 + q] = sh * d_pst[q] + pst[j, q]
            o_off[a0 + q] = sh * d_off[q] + off[j, q]


@njit(cache=True)
def _same_step(a_box, a_pst, a_off, a_x, b_box, b_pst, b_off, b_x, d_box, d_pst, d_off, d_x):
    """Whether b's positions (boxes [n, 4], partition starts, offsets, explicit deps) minus a's
    are the steps d_*, all of one layout: one pass, no difference arrays (an outer loop's
    iteration holds ~25k accesses; its differences were ~1 MB of fresh memory per check)."""
    for q in range(a_box.shape[0]):
        for c in range(4):
            if b_box[q, c] - a_box[q, c] != d_box[q, c]:
                return False
    for q in range(a_pst.shape[0]):
        if b_pst[q] - a_pst[q] != d_pst[q] or b_off[q] - a_off[q] != d_off[q]:
            return False
    for q in range(a_x.shape[0]):
        if b_x[q] - a_x[q] != d_x[q]:
            return False
    return True


def _same_step_reference(a_box, a_pst, a_off, a_x, b_box, b_pst, b_off, b_x, d_box, d_pst,
                         d_off, d_x) -> bool:
    """`_same_step` in NumPy."""
    return all(np.array_equal(b - a, d) for a, b, d in (
        (a_box, b_box, d_box), (a_pst, b_pst, d_pst), (a_off, b_off, d_off), (a_x, b_x, d_x)))


drop_stale_caches(globals())
