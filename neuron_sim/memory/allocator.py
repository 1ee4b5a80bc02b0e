"""SBUF and PSUM allocation: a first-fit allocator over the bytes of one partition (every tile
spans the same byte range in each of its partitions [ArchV2]). Over-allocation raises
CapacityError with the bytes requested and free. PSUM tiles of up to one bank (2 KiB per
partition, 512 FP32) never straddle a bank; larger ones start on a bank boundary [Tile]."""

from __future__ import annotations

from bisect import bisect_left, insort

from ..errors import CapacityError


class PartitionAllocator:
    def __init__(self, memory: str, capacity: int, chip: str, align: int = 0, bank_bytes: int = 0):
        self.memory, self.capacity, self.chip = memory, int(capacity), chip
        self.align, self.bank_bytes = align, bank_bytes
        self.blocks: list[tuple[int, int]] = []   # sorted (offset, size)
        self.peak = 0

    @property
    def used(self) -> int:
        return sum(s for _, s in self.blocks)

    def _fits(self, off: int, size: int) -> int:
        if self.bank_bytes:
            if size <= self.bank_bytes:
                if off // self.bank_bytes != (off + size - 1) // self.bank_bytes:
                    off = (off // self.bank_bytes + 1) * self.bank_bytes
            elif off % self.bank_bytes:
                off = (off // self.bank_bytes + 1) * self.bank_bytes
        elif self.align and off % self.align:
            off += self.align - off % self.align
        return off

    def alloc(self, size: int, name: str) -> int:
        size = max(1, int(size))
        cur = 0
        plain = not (self.bank_bytes or self.align)     # SBUF: any offset will do
        for off, sz in (*self.blocks, (self.capacity, 0)):
            cand = cur if plain else self._fits(cur, size)
            if cand + size <= off:
                insort(self.blocks, (cand, size))
                self.peak = max(self.peak, cand + size)   # the other blocks are counted already
                return cand
            if off + sz > cur:
                cur = off + sz
        raise CapacityError(self.memory, name, size, self.capacity - self.used, self.capacity,
                            self.chip)

    def free(self, offset: int) -> None:
        # blocks never share an offset (sizes are >= 1): the one at `offset`, found by bisection
        i = bisect_left(self.blocks, (offset,))
        if i < len(self.blocks) and self.blocks[i][0] == offset:
            del self.blocks[i]
