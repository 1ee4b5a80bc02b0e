"""Loop iterations written in bulk: `repeat.synthesize` (neuron_sim/program/repeat.py) in one
pass over the output, instead of ~25 NumPy calls and their temporaries per loop (most loops write
a few hundred rows, where those calls are the cost). `repeat.synthesize_reference` is the
specification: iteration k is the sample of its phase j = (k - first) % period, every position
moved by sh = k - first - j iterations' steps."""

from __future__ import annotations

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


drop_stale_caches(globals())
