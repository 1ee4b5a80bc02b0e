"""Broadcast operands of element-wise ops, read at their elements' positions.

An element-wise op whose operands differ in size (x + bias[D], x * scale[N, 1], scores +
mask[1, 1, S, S], x * a 0-d tensor) streams its output as whole rows of L elements, L the
longest period among its broadcast operands: rows over p partitions, k rows of each partition
per chunk, in the chunk-major layout every operand of the op shares (LowerCtx.hbm_pieces).
Whole rows put each broadcast operand at the same place in every partition and chunk, so a
compiler's access patterns read it:

- a trailing-dims operand (bias, mask, 0-d: `ROW`, n elements repeating) is one DMA per op of
  its n elements onto every partition (partition stride 0), read by each chunk's instruction
  with a free-dim stride 0;
- a leading-dims operand (a per-row scalar [N, 1]: `COL`, each element spread over n) is
  loaded per chunk as its own chunk-major slice and read with each element repeated n times
  (stride 0); a [p, 1] column goes to tensor_scalar as its per-partition operand [ISA].

Rows longer than a chunk holds (x[N, 4096] + bias: `LongRows`) go one per partition, in
pieces, as a compiler tiles [rows, columns]. Other broadcasts (over a middle dim, a strided
operand, long rows fewer than the partitions, an operand spanning several rows in more than
one chunk: a mask, which a compiler would lay with its rows on partitions) keep the stand-in
of LowerCtx.load (one small load of the operand's first elements), timing-only: `plan` says
why."""

from __future__ import annotations

from math import ceil

from ..program.ap import AccessPattern, as_ap
from .context import chunk_elems, chunk_fit, hbm_elems
from .spec import TensorSpec

ROW, COL = "row", "col"
STAND_IN = ("a broadcast operand is loaded once, as its first elements on every partition "
            "(timing: one small load), not at each element's position")


def form(t: TensorSpec, out: TensorSpec):
    """How out's elements (row-major) read t's: (ROW, n): element e reads t's e % n (t holds
    out's trailing dims; n = 1 for one element); (COL, n): e reads e // n (t holds out's
    leading dims, the last n elements of each row broadcast); None: another broadcast."""
    if t.numel == 1:
        return ROW, 1
    if t.ndim > out.ndim or not t.is_contiguous:
        return None
    dims = [(a, b) for a, b in zip((1,) * (out.ndim - t.ndim) + t.shape, out.shape) if b != 1]
    if any(a not in (1, b) for a, b in dims):
        return None
    has = [a == b for a, b in dims]
    if has == sorted(has):
        return ROW, t.numel
    return (COL, out.numel // t.numel) if has == sorted(has, reverse=True) else None


class Plan:
    """Rows of L elements over p partitions, `rows` per partition, k per chunk (the last chunk
    the rest); forms[i]: input i's form (None: as many elements as the output)."""

    def __init__(self, forms, L, p, rows, k):
        self.forms, self.L, self.p, self.k = forms, L, p, k
        self.cols, self.f, self.n = rows * L, k * L, ceil(rows / k)
        self._views: dict = {}

    def _spread(self, ap, dims, at: int = 0) -> AccessPattern:
        """`ap`'s first partition row from element `at` seen through `dims` (strides 0 repeat
        it), size-1 dims left out; made once per operand and shape (chunks reuse tiles)."""
        key = (ap, dims, at)
        view = self._views.get(key)
        if view is None:
            a = as_ap(ap)
            view = self._views[key] = AccessPattern(
                a.tensor, a.p_start, a.p_size, a.offset + at,
                tuple(d for d in dims if d[0] != 1) or ((1, 1),))
        return view

    def chunked(self, ctx):
        """LowerCtx.chunked's (p, cols, f, [(j, fj)]) of this plan."""
        return self.p, self.cols, self.f, ctx.emitted(self.cols, self.f, self.n)

    def off(self, j: int) -> int:
        """Chunk j's free offset in the [p, cols] view (where a resident output keeps it)."""
        return j * self.f

    def pieces(self, ctx, t: TensorSpec, j: int, fj: int):
        """Chunk j's HBM access for t, as LowerCtx.hbm_pieces gives it (None: that one)."""
        return None

    def load(self, ctx, i: int, t: TensorSpec, j: int, fj: int):
        """Input i's operand for chunk j ([p, fj]): a chunk like the output's, or a broadcast
        operand's pattern over it."""
        p, role = self.p, f"in{i}"
        if self.forms[i] is None:
            return ctx.load_chunk(t, p, j, fj, role, j * self.f)
        kind, n = self.forms[i]
        if kind == COL:
            m = self.L // n                     # t's elements per row
            rows = fj // self.L
            ap = ctx.load_chunk(t, p, j, rows * m, role, j * self.k * m)
            return self._spread(ap, ((rows * m, 1), (n, 0)))
        ap = ctx.resident_ap(t, p, 0, n)
        return self._spread(ctx.load_once(t, p, n) if ap is None else ap, ((fj // n, 0), (n, 1)))


class LongRows(Plan):
    """Rows longer than a chunk holds: one row per partition, p rows per block, each row in
    pieces of f elements, as a compiler tiles [rows, columns] (with one piece, Plan's
    chunk-major layout), addressed at the rows' pitch L; a block's pieces have overlapping
    footprints (the dependency tracker orders them). Chunk j is block j % blocks of piece
    j // blocks: a bias's piece is loaded once (onto every partition) for all the blocks that
    read it, a per-row operand once for the op, as [p, blocks]."""

    def __init__(self, forms, L, p, blocks, fc):
        super().__init__(forms, L, p, blocks, 1)
        self.blocks = blocks
        nc = ceil(L / fc)
        self.f = ceil(L / nc)
        self.n = blocks * nc
        self._loaded: dict = {}         # (input, piece) -> its tile

    def chunked(self, ctx):
        # a row's last piece is short in representative chunks too (a full one would pass the
        # row's end: past a bias's)
        return self.p, self.cols, self.f, [
            (j, min(self.f, self.L - j // self.blocks * self.f))
            for j in range(ctx.repeat(self.n))]

    def off(self, j: int) -> int:
        c, b = divmod(j, self.blocks)
        return b * self.L + c * self.f

    def pieces(self, ctx, t: TensorSpec, j: int, fj: int):
        c, b = divmod(j, self.blocks)
        at = b * self.p * self.L + c * self.f
        return [(AccessPattern(ctx.hbm(t), 0, self.p, at, ((fj, 1),), self.L), 0, fj)]

    def load(self, ctx, i: int, t: TensorSpec, j: int, fj: int):
        p, role, form = self.p, f"in{i}", self.forms[i]
        if form is None:
            return ctx.load_chunk(t, p, j, fj, role, self.off(j), self.pieces(ctx, t, j, fj))
        c, b = divmod(j, self.blocks)
        if form[1] == 1:
            return self._spread(ctx.load_once(t, p, 1), ((fj, 0),))
        col = form[0] == COL            # one value per row: rows b * p + q as [p, blocks]
        key = (i, 0 if col else c)
        tile = self._loaded.get(key)
        if tile is None:
            shape, src = ((p, self.blocks), ((self.blocks, p),)) if col else ((p, fj), ((fj, 1),))
            tile = self._loaded[key] = ctx.tile(role, shape, t.dtype, c)
            ctx.b.dma_copy(tile, AccessPattern(ctx.in_hbm(t), 0, p, 0 if col else c * self.f, src,
                                               1 if col else 0))
        return self._spread(tile, ((fj, 0),), b) if col else tile      # block b's column


def column(ap):
    """The [p, 1] column a pattern of one element per partition repeats (Plan._spread's
    ((f, 0),)), for tensor_scalar's per-partition operand; None for any other operand."""
    if ap.__class__ is not AccessPattern or len(ap.dims) != 1 or ap.dims[0][1] \
            or ap.dims[0][0] == 1:
        return None
    col = _COLUMNS.get(ap)
    if col is None:
        if len(_COLUMNS) > 4096:
            _COLUMNS.clear()
        col = _COLUMNS[ap] = AccessPattern(ap.tensor, ap.p_start, ap.p_size, ap.offset,
                                           ((1, 1),))
    return col


_COLUMNS: dict = {}     # column(): one per pattern (each chunk of an op asks for the same)


def plan(out: TensorSpec, ins, chip):
    """(Plan, None) streaming `out` from `ins` (some with fewer elements), or (None, why not)."""
    forms = [None if t.numel == out.numel else form(t, out) for t in ins]
    if any(t.numel != out.numel and f is None for t, f in zip(ins, forms)):
        return None, STAND_IN + " (a broadcast over a middle dim, or a strided one)"
    L = max(n for _, n in filter(None, forms))
    full = [out] + [t for t, f in zip(ins, forms) if f is None]
    fit = chunk_fit(chip, out.dtype, len(full))
    P = chip.sbuf_partitions
    R = out.numel // L
    p = max(1, min(P, R))
    rows = ceil(R / p)
    if L > fit and (R < P or any(f and f[1] not in (1, L) for f in forms)
                    or not all(t.is_contiguous for t in full)):
        return None, (f"its rows of {L} elements are longer than a chunk holds ({fit}) and "
                      f"fewer than {P}, or not one value per row or per element: " + STAND_IN)
    k = max(1, chunk_elems(chip, rows * L, out.dtype, len(full)) // L)
    k = ceil(rows / ceil(rows / k))             # balanced chunks, as LowerCtx.chunks
    last = next((d for d in reversed(out.shape) if d != 1), 1)
    if any(f and f[0] == ROW and f[1] > last for f in forms) and (L > fit or rows > k):
        return None, ("a broadcast operand spanning several rows (a mask [S, S], a position "
                      "table) in more than one chunk would be read once per partition (a "
                      "compiler puts its rows on partitions, not done here): " + STAND_IN)
    # a row count that is no multiple of p pads the last chunk: it must stay inside each tensor
    reach = [(t, p * rows * L) for t in full] + [
        (t, p * rows * L // f[1]) for t, f in zip(ins, forms) if f and f[0] == COL]
    if R % p and any(need * (1 if t.is_contiguous else 2) > hbm_elems(t, P)
                     for t, need in reach):
        return None, (f"its {R} rows of {L} elements do not divide over {p} partitions and the "
                      f"last chunk would pass a tensor's end: " + STAND_IN)
    if L > fit:
        return LongRows(forms, L, p, rows, chunk_elems(chip, L, out.dtype, len(full))), None
    return Plan(forms, L, p, rows, k), None
