"""The lockstep decode set of one replica's engine (:class:`core.serving.sim.engine.Engine`'s base): the sequences
decoding, their context bases, block phases and finish iterations, and the KV blocks a run of decode iterations
allocates. A decoding sequence's context is ``base + D`` (``D`` = decode iterations so far), so the set's attended
pairs and cached reads are affine in ``D`` (see the engine's module docstring)."""

from __future__ import annotations

import heapq

from core.serving.sim.pool import Pool

_EPS = 1e-9


class DecodeSet:
    """The decode set's state lives on the engine; these are its methods that need nothing else."""

    pool: Pool
    reserve: bool
    sliding: bool
    block_tokens: int
    pool_blocks: float
    full_share: float
    slide_share: float
    window: int
    decode_iters: int
    num_decoding: int
    num_in_window: int
    base_sum: int
    base_sum_in_window: int
    hist_f: list[int]
    hist_s: list[int]
    fin_heap: list[tuple[int, int]]
    cross_heap: list[tuple[int, int]]
    ctx: list[int]
    out: list[int]
    gen: list[int]
    fin_d: list[int]
    lo: list[bool]

    def used(self) -> float:
        raise NotImplementedError

    def _decode_need(self) -> float:
        """Blocks-worth the decode set allocates in the next iteration."""
        if self.reserve or not self.num_decoding:
            return 0.0
        ph = (-self.decode_iters) % self.block_tokens
        return self.full_share * self.hist_f[ph] + (self.slide_share * self.hist_s[ph] if self.sliding else 0.0)

    def _kv_run_bound(self, kmax: int) -> int:
        """Decode iterations (<= kmax) whose block allocations all succeed."""
        if self.reserve:
            return kmax
        cyc = self.full_share * self.num_decoding + self.slide_share * self.num_in_window
        if cyc <= 0:
            return kmax
        free = self.pool_blocks - self.used() + _EPS
        if free < 0:
            return 0
        B = self.block_tokens
        q = int(free // cyc)
        if q * B >= kmax:
            return kmax
        rem = free - q * cyc
        D, hf, hs, wf, ws = self.decode_iters, self.hist_f, self.hist_s, self.full_share, self.slide_share
        for j in range(B):
            ph = (-(D + j)) % B
            need = wf * hf[ph] + ws * hs[ph]
            if need > rem:
                return min(kmax, q * B + j)
            rem -= need
        return min(kmax, q * B + B)  # unreachable: a full cycle costs cyc > rem

    def _join_decode(self, rid: int, c: int) -> None:
        base = c - self.decode_iters
        self.ctx[rid] = base
        ph = base % self.block_tokens
        self.num_decoding += 1
        self.base_sum += base
        self.hist_f[ph] += 1
        if self.sliding and c < self.window:
            self.lo[rid] = True
            self.num_in_window += 1
            self.base_sum_in_window += base
            self.hist_s[ph] += 1
            heapq.heappush(self.cross_heap, (self.window - base, rid))
        fd = self.decode_iters + self.out[rid] - self.gen[rid]
        self.fin_d[rid] = fd
        heapq.heappush(self.fin_heap, (fd, rid))

    def _leave_decode(self, rid: int) -> int:
        """Take ``rid`` out of the decode set; returns its context."""
        base = self.ctx[rid]
        ph = base % self.block_tokens
        self.num_decoding -= 1
        self.base_sum -= base
        self.hist_f[ph] -= 1
        if self.lo[rid]:
            self.lo[rid] = False
            self.num_in_window -= 1
            self.base_sum_in_window -= base
            self.hist_s[ph] -= 1
        self.gen[rid] = self.out[rid] - (self.fin_d[rid] - self.decode_iters)
        self.fin_d[rid] = -1
        return base + self.decode_iters

    def _decode_AR(self) -> tuple[float, float, float]:
        """(A, R, g) of the decode set now: attended pairs, cached tokens read, growth per iteration."""
        m, D = self.num_decoding, self.decode_iters
        if not self.sliding:
            R = float(self.base_sum + m * D)
            return R + m, R, float(m)
        wf, ws = self.full_share, self.slide_share
        lo_ctx = self.base_sum_in_window + self.num_in_window * D
        R = wf * (self.base_sum + m * D) + ws * (lo_ctx + (m - self.num_in_window) * self.window)
        g = wf * m + ws * self.num_in_window
        return R + g, R, g

    def fin_heap_min(self) -> int:
        fh = self.fin_heap
        while fh and self.fin_d[fh[0][1]] != fh[0][0]:
            heapq.heappop(fh)
        return fh[0][0]

    def cross_min(self) -> int:
        ch = self.cross_heap
        while ch and not (self.lo[ch[0][1]] and self.ctx[ch[0][1]] == self.window - ch[0][0]):
            heapq.heappop(ch)
        return ch[0][0] if ch else 1 << 62
