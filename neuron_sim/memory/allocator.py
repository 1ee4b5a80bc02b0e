"""SBUF and PSUM allocation: a first-fit allocator over the bytes of one partition (every tile
spans the same byte range in each of its partitions [ArchV2]). Over-allocation raises
CapacityError with the bytes requested and free. PSUM tiles of up to one bank (2 KiB per
partition, 512 FP32) never straddle a bank; larger ones start on a bank boundary [Tile]."""

from __future__ import annotations

from bisect import bisect_left, insort

from ..errors import CapacityError


class PartitionAllocator:
    def __init__(self, memory: str, capacity: int, chip: str, bank_bytes: int = 0):
        self.memory, self.capacity, self.chip = memory, int(capacity), chip
        self.bank_bytes = bank_bytes
        self.blocks: list[tuple[int, int]] = []   # sorted (offset, size)
        self.peak = 0

    @property
    def used(self) -> int:
        return sum(s for _, s in self.blocks)

    def _fits(self, off: int, size: int) -> int:
        """The first offset from `off` where a PSUM tile of `size` bytes may start: a tile of up
        to one bank does not straddle two, a larger one starts on a bank boundary."""
        bank = self.bank_bytes
        straddles = off // bank != (off + size - 1) // bank
        if straddles if size <= bank else off % bank:
            off = (off // bank + 1) * bank
        return off

    def alloc(self, size: int, name: str) -> int:
        size = max(1, int(size))
        cur = 0
        for off, sz in (*self.blocks, (self.capacity, 0)):
            cand = self._fits(cur, size) if self.bank_bytes else cur   # SBUF: any offset
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
