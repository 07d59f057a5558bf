"""The event loop: one replica under continuous batching, iteration by iteration.

One :class:`Engine` owns the clock ``now_s``, the queues, the KV pool and its counters; it draws nothing itself (the
workload's :class:`~core.config.workload.Draws` come from the injected generator) and returns plain records. An
iteration is timed by the step model for its exact mix of prefill and decode tokens (``T`` new tokens, ``A``
attended pairs, ``R`` cached tokens read).

Speed: between events nothing but decoding happens, and every decoding sequence gains one token per decode
iteration, so the decode set advances in lockstep. A sequence's context is ``base + D`` (``D`` = decode iterations
so far, ``Engine.decode_iters``), so the batch's ``R`` and ``A`` are affine in ``D`` and a whole run of
identical-shape decode iterations is timed in closed form (:mod:`core.serving.sim.timing`); the run stops at the
next event: an arrival the scheduler could act on, the first sequence to finish, a timeout, the KV pool running out
(paged blocks counted exactly via the block phase of each sequence), or a sequence's context reaching a sliding
window. No Python work per token.

Scheduling (vLLM V1 / Sarathi-Serve for ``chunked``, vLLM V0 for ``prefill_priority``):

* ``chunked``: each iteration first gives every decoding sequence its token, then continues partial prefills, then
  admits waiting requests first-come first-served while the token budget, the batch limit and the KV pool allow; a
  prompt longer than what is left of the budget is split into chunks over iterations. A request that does not fit
  blocks the ones behind it (strict FCFS).
* ``prefill_priority``: when the head of the queue can be admitted, the iteration prefills whole prompts (FCFS, up
  to the token budget; a prompt longer than the budget runs alone) and the decoding sequences wait; otherwise it
  decodes every running sequence.

KV admission:

* ``preempt``: paged blocks of ``block_size`` tokens allocated as tokens are computed; when an iteration's blocks
  cannot be allocated, the most recently admitted running sequence is preempted (its blocks freed, it returns to the
  head of the queue and later recomputes its prompt plus the tokens it had generated: recompute, as vLLM does); no
  admissions in such an iteration. With ``prefix_caching`` (vLLM V1's default) the victim's full blocks stay in the
  prefix cache: freed blocks join the tail of vLLM's free queue, so allocations evict everything older first, and
  the victim at the head of the queue keeps ``min(its full blocks, free blocks when it is re-admitted)``; those
  tokens are a cache hit and only the rest (at least the last token) is recomputed. Not modelled for sliding-window
  models (their windowed blocks are not reusable the same way).
* ``reserve``: admission reserves the blocks of prompt + the workload's largest output (the client's max_tokens) up
  front; never preempts.

Asynchronous scheduling (``async_scheduling``, vLLM V1's default since 0.12: ``EngineCore.step_with_batch_queue`` in
vllm/v1/engine/core.py keeps two batches in flight, and vllm/v1/core/sched/async_scheduler.py plans the next one
before the current one's outputs are back): iteration k+1 is planned as soon as iteration k is launched, so the plan
of an iteration sees the arrivals up to the start of the iteration before it (``seen_s``). A request that arrives
during iteration k is admitted at the earliest in k+2, and a run of decode iterations that an arrival cuts stops at
the end of the iteration after the one the arrival falls in. An engine with nothing running plans at once.

A request that can never fit (its whole context exceeds the pool, or the model's context window) is rejected on
arrival, counted, and never blocks the queue. With ``timeout_s``, a request not finished that long after its arrival
is cancelled (waiting or running; a running one at the end of the iteration in progress) and its blocks are freed.

Sliding-window layers (Mistral, gpt-oss): the pool is in bytes, so a sequence of context ``c`` holds ``f ceil(c/B) +
s ceil(min(c, w)/B)`` blocks-worth, with ``f`` and ``s`` the shares of full and sliding layers; the attended pairs
and cached reads use the same per-layer-average clipping (a decode token at context ``c`` attends ``f (c+1) + s
min(c+1, w)`` keys per layer on average)."""

from __future__ import annotations

import heapq
import math
from array import array
from collections import deque

from core.base import WorkBudget
from core.config import Draws, SimSpec
from core.serving.sim.adapters import Adapters
from core.serving.sim.arrivals import ArrivalStream
from core.serving.sim.decode_set import DecodeSet
from core.serving.sim.pool import Pool
from core.serving.sim.records import DONE, MIXED, NONE, REJECTED, RUN, TIMED_OUT, UNFINISHED, Records  # noqa: F401
from core.serving.sim.timing import Timing

INF = math.inf
_EPS = 1e-9
_NO_RUN = (0, 0.0, 0, 0.0, 0.0, 0.0, INF, False)  # no run of decode iterations planned


class Engine(ArrivalStream, DecodeSet):
    """One replica: the clock, the queues, the KV pool and the counters of one simulation."""

    def __init__(self, spec: SimSpec, timing: Timing, pool: Pool, draws: Draws, lora: Adapters | None = None) -> None:
        self.spec, self.timing, self.pool, self.draws = spec, timing, pool, draws
        self.lora = lora  # the adapters (multi-LoRA serving), None without
        self._load_s = 0.0  # adapter loads the iteration being planned waits for
        self.adapter_distinct_s = 0.0
        self._pend_D = 0  # the running set's adapters during the planned run of decode iterations
        self.block_tokens = pool.block
        self.pool_blocks = pool.blocks
        self.inv_P = 1.0 / pool.blocks if pool.blocks > 0 else 0.0
        self.full_share, self.slide_share, self.window = pool.full_share, pool.slide_share, pool.window
        self.sliding = pool.slide_share > 0
        self.reserve = spec.admission == "reserve"
        self.async_on = spec.async_scheduling
        self.seen_s = 0.0  # async scheduling: the plan sees arrivals up to here (the last iteration's start)
        self._cut_s = 0.0  # the plan being made sees arrivals up to here
        self.max_out = spec.max_output_tokens()
        self.now_s = 0.0
        # per request (index = request number)
        self.arr: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.status: list[int] = []
        self.admit_s: list[float] = []
        self.first_s: list[float] = []
        self.fin_s: list[float] = []
        self.npre: list[int] = []
        self.gen: list[int] = []  # tokens emitted (decoding sequences: refreshed from out - (fin_d - D) on leaving)
        self.ctx: list[int] = []  # prefilling: tokens computed; decoding: base (context - D)
        self.target: list[int] = []  # prefill length of the current admission
        self.fin_d: list[int] = []  # D at which a decoding sequence emits its last token; -1 otherwise
        self.lo: list[bool] = []  # decoding and context below the sliding window
        self.res: list[float] = []  # reserved blocks-worth (reserve admission)
        self.cached: list[int] = []  # preempted: tokens of its full blocks left in the prefix cache
        self.keep_cache = spec.prefix_caching and not self.reserve and not self.sliding
        # a decode instance of a disaggregated deployment: a request's prompt KV arrives whole from its prefill
        # instance, so it is admitted only when blocks for all of it are free (never partly recomputed)
        self.remote_kv = False
        # the step planned and timed but not yet ended (begin_step / end_step): its kind and end
        self.pend_kind = NONE
        self.pend_end_s = 0.0
        self._pend_chunks: list[tuple[int, int]] = []
        self._pend_decoding = False
        self._pend_run: tuple[int, float, int, float, float, float, float, bool] = _NO_RUN
        # queues
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # admission order (the last is preempted first)
        self.prefilling: list[int] = []  # running, still prefilling (admission order)
        # lockstep decode set
        self.decode_iters = 0
        self.num_decoding = 0
        self.num_in_window = 0
        self.base_sum = 0
        self.base_sum_in_window = 0
        self.hist_f = [0] * self.block_tokens
        self.hist_s = [0] * self.block_tokens
        self.fin_heap: list[tuple[int, int]] = []
        self.cross_heap: list[tuple[int, int]] = []
        self.dl_heap: list[tuple[float, int]] = []
        # KV blocks held (or reserved): full-layer and sliding-layer block counts
        self.full_blocks = 0
        self.slide_blocks = 0
        self.used_res = 0.0
        # arrivals
        self.issued = 0
        self.arrivals: list[tuple[float, int]] = []  # closed loop: (time, user-seq) heap
        self.next_poisson = draws.gaps[0] if spec.arrival == "poisson" else INF
        self.next_arr = self.next_poisson  # time of the next arrival (kept current: the hot loop reads it)
        self.last_arrival_s = 0.0
        # counters
        self.busy_s = 0.0
        self.prefill_s = 0.0
        self.iterations = 0
        self.preemptions = 0
        self._preempted_now = False
        # time series
        self.ts_s, self.ts_w, self.ts_r, self.ts_kv = array("d"), array("d"), array("d"), array("d")
        if spec.arrival == "closed":
            for u in range(self._issue_cap(spec.users)):
                self.arrivals.append((0.0, u))
            heapq.heapify(self.arrivals)
            self.next_arr = self.arrivals[0][0] if self.arrivals else INF

    # --- arrivals ---------------------------------------------------------------------------------
    def _absorb_arrivals(self) -> None:
        """Queue (or reject) every request that has arrived by now; one time-series point at each arrival."""
        while self.next_arr <= self.now_s and self.next_arr < INF:  # an infinite clock admits nothing more
            t, i, o, hit = self._next_request()
            rid = self.issued
            self.issued += 1
            self.arr.append(t)
            self.inp.append(i)
            self.out.append(o)
            self.status.append(UNFINISHED)
            self.admit_s.append(math.nan)
            self.first_s.append(math.nan)
            self.fin_s.append(math.nan)
            self.npre.append(0)
            self.gen.append(0)
            self.ctx.append(0)
            self.target.append(0)
            self.fin_d.append(-1)
            self.lo.append(False)
            self.res.append(0.0)
            self.cached.append(hit)
            self.last_arrival_s = t
            need = self.pool.blocks_for(i + (self.max_out if self.reserve else o - 1))
            if i + o > self.pool.max_context or need > min(self.pool_blocks, self.pool.seq_blocks_max) + _EPS:
                self.status[rid] = REJECTED
                self.fin_s[rid] = t
                self._user_done(rid, t)
                continue
            self.waiting.append(rid)
            if self.spec.timeout_s is not None:
                heapq.heappush(self.dl_heap, (t + self.spec.timeout_s, rid))
            self._record(t)

    # --- KV ---------------------------------------------------------------------------------------
    def used(self) -> float:
        return (
            self.used_res if self.reserve else self.full_share * self.full_blocks + self.slide_share * self.slide_blocks
        )

    def _chunk_blocks(self, c: int, n: int) -> tuple[int, int]:
        B = self.block_tokens
        f = (c + n + B - 1) // B - (c + B - 1) // B
        if not self.sliding:
            return f, 0
        w = self.window
        s = (min(c + n, w) + B - 1) // B - (min(c, w) + B - 1) // B
        return f, s

    def _release(self, rid: int, c: int) -> None:
        if self.lora is not None:
            self.lora.release(rid)
        if self.reserve:
            self.used_res -= self.res[rid]
            self.res[rid] = 0.0
            return
        B = self.block_tokens
        self.full_blocks -= (c + B - 1) // B
        if self.sliding:
            self.slide_blocks -= (min(c, self.window) + B - 1) // B

    # --- the lockstep decode set (the rest in core.serving.sim.decode_set) ---------------------------
    def _advance_decode(self, k: int) -> None:
        """Account ``k`` decode iterations (blocks, D), then finish the sequences that are done."""
        if not self.reserve:
            B, D = self.block_tokens, self.decode_iters
            if k == 1:
                ph = (-D) % B
                self.full_blocks += self.hist_f[ph]
                if self.sliding:
                    self.slide_blocks += self.hist_s[ph]
            else:
                q, r = divmod(k, B)
                hf = self.hist_f
                self.full_blocks += q * self.num_decoding + sum(hf[(-(D + j)) % B] for j in range(r))
                if self.sliding:
                    hs = self.hist_s
                    self.slide_blocks += q * self.num_in_window + sum(hs[(-(D + j)) % B] for j in range(r))
        self.decode_iters += k
        D = self.decode_iters
        fh = self.fin_heap
        while fh and fh[0][0] <= D:
            fd, rid = heapq.heappop(fh)
            if self.fin_d[rid] != fd:
                continue  # stale: preempted or cancelled since
            self._complete(rid, self._leave_decode(rid))
        ch = self.cross_heap
        while ch and ch[0][0] <= D:
            cd, rid = heapq.heappop(ch)
            if not self.lo[rid] or self.ctx[rid] != self.window - cd:
                continue
            base = self.ctx[rid]
            self.lo[rid] = False
            self.num_in_window -= 1
            self.base_sum_in_window -= base
            self.hist_s[base % self.block_tokens] -= 1

    def _complete(self, rid: int, c: int) -> None:
        """A request emitted its last token with context ``c``: it leaves and its blocks are freed."""
        self.running.remove(rid)
        self._release(rid, c)
        self._finish(rid, DONE)

    def _finish(self, rid: int, status: int) -> None:
        self.status[rid] = status
        self.fin_s[rid] = self.now_s
        self._user_done(rid, self.now_s)

    # --- preemption and timeouts ------------------------------------------------------------------
    def _take_out(self, rid: int) -> int:
        """Remove a running request (prefilling or decoding) and free its blocks; returns its context."""
        self.running.remove(rid)
        if self.fin_d[rid] >= 0:
            c = self._leave_decode(rid)
        else:
            self.prefilling.remove(rid)
            c = self.ctx[rid]
        self._release(rid, c)
        return c

    def _preempt_last(self) -> None:
        rid = self.running[-1]
        c = self._take_out(rid)
        self.cached[rid] = (c // self.block_tokens) * self.block_tokens if self.keep_cache else 0
        self.ctx[rid] = 0
        self.npre[rid] += 1
        self.preemptions += 1
        self.waiting.appendleft(rid)

    def _expire(self) -> None:
        now = self.now_s
        dh = self.dl_heap
        while dh and dh[0][0] <= now:
            t, rid = heapq.heappop(dh)
            if self.status[rid] != UNFINISHED:
                continue
            if rid in self.running:
                self._take_out(rid)
            else:
                self.waiting.remove(rid)
            self._finish(rid, TIMED_OUT)

    def _next_deadline(self) -> float:
        dh = self.dl_heap
        while dh and self.status[dh[0][1]] != UNFINISHED:
            heapq.heappop(dh)
        return dh[0][0] if dh else INF

    # --- scheduling -------------------------------------------------------------------------------
    def _hit(self, rid: int, used: float) -> int:
        """Cached tokens the head request finds when admitted with ``used`` blocks-worth taken (see above)."""
        cached = self.cached[rid]
        if not cached:
            return 0
        B = self.block_tokens
        free = int(math.floor(self.pool_blocks - used + _EPS))
        last = ((self.inp[rid] + self.gen[rid] - 1) // B) * B  # the last token is always recomputed
        if self.remote_kv and free * B < min(cached, last):
            return -1  # the transferred KV waits until blocks for all of it are free
        hit = min(cached, free * B, last)  # whole blocks only: vLLM's prefix cache hashes full blocks
        return max(0, hit - hit % B)

    def _admit(self, rid: int, hit: int = 0, at: int = 0) -> None:
        del self.waiting[at]  # the head, or one behind requests skipped for their adapters
        if self.lora is not None:
            self._load_s += self.lora.acquire(rid, self.now_s)
        self.running.append(rid)
        self.prefilling.append(rid)
        self.ctx[rid] = hit
        self.cached[rid] = 0
        if hit:
            self.full_blocks += hit // self.block_tokens  # the cached blocks are taken back
        self.target[rid] = self.inp[rid] + self.gen[rid]  # recompute after a preemption
        if math.isnan(self.admit_s[rid]):
            self.admit_s[rid] = self.now_s
        if self.reserve:
            need = self.pool.blocks_for(self.inp[rid] + self.max_out)
            self.res[rid] = need
            self.used_res += need

    def _admission_need(self, rid: int, n: int) -> float:
        if self.reserve:
            return self.pool.blocks_for(self.inp[rid] + self.max_out)
        f, s = self._chunk_blocks(0, n)
        return self.full_share * f + self.slide_share * s

    def step(self) -> None:
        """One scheduler decision: a single iteration with prefill work, or a run of decode iterations."""
        self.begin_step()
        self.end_step()

    def begin_step(self) -> float:
        """Plan the next scheduler decision and time it; returns when it ends [s]. What happens at its end
        (arrivals absorbed, tokens emitted, requests leaving) waits for :meth:`end_step`, so a deployment's
        replicas can step side by side and a run of decode iterations can still be cut short by an arrival
        (:meth:`cut_run`)."""
        chunks: list[tuple[int, int]] = []  # (request, tokens this iteration)
        # a run of decode iterations is valid only while the queue cannot move: after a preemption
        # the head was not even considered (no admissions in such an iteration), so run one iteration
        self._preempted_now = False
        self._cut_s = self.seen_s if self.async_on and self.running else self.now_s
        if self.spec.policy == "chunked":
            self._plan_chunked(chunks)
        else:
            self._plan_prefill_priority(chunks)
        self.pend_end_s = self.now_s
        if chunks:
            self._begin_mixed(chunks)
            return self.pend_end_s
        if self.num_decoding:
            self._begin_run(1 if self._preempted_now else None)
            return self.pend_end_s
        self.pend_kind = NONE
        if self.waiting and not self.running:
            rid = self.waiting[0]
            n = min(self.inp[rid] + self.gen[rid], self.spec.token_budget)
            if self._admission_need(rid, n) > self.pool_blocks + _EPS:
                # cannot run even in an empty engine (arrival checks make this unreachable; no silent stall)
                self.waiting.popleft()
                self._finish(rid, REJECTED)
            # else: preemption emptied the engine this step; the next step admits the head
        return self.pend_end_s

    def end_step(self) -> None:
        """End the step :meth:`begin_step` planned: the clock moves to its end and its effects happen."""
        kind = self.pend_kind
        if kind == MIXED:
            self._end_mixed()
        elif kind == RUN:
            self._end_run()
        self.pend_kind = NONE
        self._record()

    def _plan_chunked(self, chunks: list[tuple[int, int]]) -> None:
        K = self.spec.token_budget
        preempted = False
        while True:
            left = K - self.num_decoding
            need = self._decode_need()
            chunks.clear()
            for rid in self.prefilling:
                if left <= 0:
                    break
                c = self.ctx[rid]
                n = min(self.target[rid] - c, left)
                left -= n
                chunks.append((rid, n))
                if not self.reserve:
                    f, s = self._chunk_blocks(c, n)
                    need += self.full_share * f + self.slide_share * s
            if self.reserve or self.used() + need <= self.pool_blocks + _EPS or not self.running:
                break
            self._preempt_last()
            preempted = True
        if preempted:
            self._preempted_now = True
            return
        used = self.used() + need
        mb = self.spec.max_batch
        lora, j = self.lora, 0
        while j < len(self.waiting) and left > 0 and len(self.running) < mb:
            rid = self.waiting[j]
            if self.arr[rid] > self._cut_s:
                break  # arrived after this plan was made (async scheduling): the next plan sees it
            if lora is not None and not lora.admissible(rid, self.now_s):
                j += 1  # its adapter would exceed max_loras: skipped, it keeps its place (vLLM)
                continue
            h = self._hit(rid, used)
            if h < 0:
                break
            n = min(self.inp[rid] + self.gen[rid] - h, left)
            add = (
                self._admission_need(rid, n)
                if not h or self.reserve
                else h // self.block_tokens + self._chunk_blocks(h, n)[0]
            )
            if used + add > self.pool_blocks + _EPS:
                break
            self._admit(rid, h, j)
            used += add
            left -= n
            chunks.append((rid, n))

    def _plan_prefill_priority(self, chunks: list[tuple[int, int]]) -> None:
        K = self.spec.token_budget
        mb = self.spec.max_batch
        used = self.used()
        total = 0
        lora, j = self.lora, 0
        while j < len(self.waiting) and len(self.running) < mb:
            rid = self.waiting[j]
            if self.arr[rid] > self._cut_s:
                break  # arrived after this plan was made (async scheduling): the next plan sees it
            if lora is not None and not lora.admissible(rid, self.now_s):
                j += 1  # its adapter would exceed max_loras: skipped, it keeps its place (vLLM)
                continue
            h = self._hit(rid, used)
            if h < 0:
                break
            n = self.inp[rid] + self.gen[rid] - h
            if chunks and total + n > K:
                break
            # reserve admission takes the whole reservation whether or not a prefix is cached (_admit adds it to
            # used_res): counting only the hit and the prompt's blocks would reserve past the pool
            add = (
                self._admission_need(rid, n)
                if not h or self.reserve
                else h // self.block_tokens + self._chunk_blocks(h, n)[0]
            )
            if used + add > self.pool_blocks + _EPS:
                break
            self._admit(rid, h, j)
            used += add
            total += n
            chunks.append((rid, n))
        if chunks:
            return
        while self.num_decoding and not self.reserve and self.used() + self._decode_need() > self.pool_blocks + _EPS:
            self._preempt_last()
            self._preempted_now = True

    def _begin_mixed(self, chunks: list[tuple[int, int]]) -> None:
        pool, tm = self.pool, self.timing
        decoding = self.num_decoding > 0 and self.spec.policy == "chunked"
        if decoding:
            A_d, R_d, _ = self._decode_AR()
            T, A, R = self.num_decoding, A_d, R_d
        else:
            T, A, R = 0, 0.0, 0.0
        for rid, n in chunks:
            c = self.ctx[rid]
            T += n
            A += pool.chunk_pairs(c, n)
            R += pool.eff(c)
            if not self.reserve:
                f, s = self._chunk_blocks(c, n)
                self.full_blocks += f
                self.slide_blocks += s
        # sequences scheduled: every decoding one and each prompt with a chunk; D: the running set's adapters
        D = self.lora.distinct if self.lora is not None else 0
        dt = tm.one(T, A, R, (self.num_decoding if decoding else 0) + len(chunks), D) + self._load_s
        self._load_s = 0.0
        self.busy_s += dt
        self.prefill_s += dt - (tm.one(self.num_decoding, A_d, R_d, None, D) if decoding else 0.0)
        self.adapter_distinct_s += D * dt
        self.iterations += 1
        self.pend_kind, self.pend_end_s = MIXED, self.now_s + dt
        self.seen_s = self.now_s
        self._pend_chunks, self._pend_decoding = chunks, decoding

    def _end_mixed(self) -> None:
        chunks, decoding = self._pend_chunks, self._pend_decoding
        self.now_s = self.pend_end_s
        if self.next_arr <= self.now_s:
            self._absorb_arrivals()  # those that came during the iteration, before anything leaves
        if decoding:
            self._advance_decode(1)
        for rid, n in chunks:
            c = self.ctx[rid] + n
            self.ctx[rid] = c
            if c < self.target[rid]:
                continue
            self.prefilling.remove(rid)
            self.gen[rid] += 1
            if self.gen[rid] == 1:
                self.first_s[rid] = self.now_s
            if self.gen[rid] >= self.out[rid]:
                self._complete(rid, c)
            else:
                self._join_decode(rid, c)

    def _begin_run(self, limit: int | None = None) -> None:
        kmax = self.fin_heap_min() - self.decode_iters
        if limit is not None:
            kmax = min(kmax, limit)
        if self.sliding and self.num_in_window:
            kmax = min(kmax, self.cross_min() - self.decode_iters)
        kmax = self._kv_run_bound(kmax)
        if kmax <= 0:  # cannot happen after planning; guard against a silent stall
            raise RuntimeError("decode run without room for one iteration")
        t_dead = self._next_deadline() if self.dl_heap else INF
        t_event = t_dead
        # a waiting head blocks the queue: an arrival changes nothing until an end; with adapters an arrival may
        # join at once although others wait (theirs would exceed max_loras)
        w, cut = self.waiting, self._cut_s
        cut_ok = not w or self.lora is not None or (self.async_on and self.arr[w[0]] > cut)
        A, R, g = self._decode_AR()
        D = self._pend_D = self.lora.distinct if self.lora is not None else 0
        if self.async_on and cut_ok:
            # an arrival is seen by the plan made at the start of the iteration after the one it falls in, so the run
            # stops one iteration later; one already waiting unseen (it came during the last iteration) is seen next
            if w and self.arr[w[-1]] > cut:
                kmax = 1
            elif self.next_arr < INF:
                kmax = min(
                    kmax, self.timing.run(self.num_decoding, A, R, g, kmax, self.next_arr - self.now_s, D)[0] + 1
                )
        elif cut_ok and self.next_arr < t_event:
            t_event = self.next_arr
        k, dt = self.timing.run(self.num_decoding, A, R, g, kmax, t_event - self.now_s if t_event < INF else INF, D)
        self.pend_kind, self.pend_end_s = RUN, self.now_s + dt
        self._pend_run = (k, dt, kmax, A, R, g, t_dead, cut_ok)

    def cut_run(self, t: float) -> float:
        """An arrival at ``t`` during the planned run of decode iterations: the run stops at the iteration
        during which it comes (as it would have had the arrival been known when it was planned), or with async
        scheduling at the one after it, unless a waiting request already blocks the queue. Returns the step's
        end [s]."""
        if self.pend_kind != RUN or t >= self.pend_end_s:
            return self.pend_end_s
        k, dt, kmax, A, R, g, t_dead, cut_ok = self._pend_run
        if not cut_ok:
            return self.pend_end_s
        if self.async_on:  # seen one iteration after the one it falls in (never past the run planned)
            ka = self.timing.run(self.num_decoding, A, R, g, kmax, t - self.now_s, self._pend_D)[0] + 1
            k, dt = self.timing.run(self.num_decoding, A, R, g, min(k, ka), t_dead - self.now_s, self._pend_D)
        else:
            k, dt = self.timing.run(self.num_decoding, A, R, g, kmax, min(t, t_dead) - self.now_s, self._pend_D)
        self._pend_run = (k, dt, kmax, A, R, g, t_dead, cut_ok)
        self.pend_end_s = self.now_s + dt
        return self.pend_end_s

    def _end_run(self) -> None:
        k, dt = self._pend_run[0], self._pend_run[1]
        if self.async_on:  # the next plan was made when the run's last iteration started
            _, _, _, A, R, g, _, _ = self._pend_run
            before = self.timing.run(self.num_decoding, A, R, g, k - 1, INF, self._pend_D)[1] if k > 1 else 0.0
            self.seen_s = self.now_s + before
        self.adapter_distinct_s += self._pend_D * dt
        self.busy_s += dt
        self.iterations += k
        self.now_s = self.pend_end_s
        if self.next_arr <= self.now_s:
            self._absorb_arrivals()
        self._advance_decode(k)

    def _record(self, t: float | None = None) -> None:
        self.ts_s.append(self.now_s if t is None else t)
        self.ts_w.append(len(self.waiting))
        self.ts_r.append(len(self.running))
        self.ts_kv.append(
            (
                self.used_res
                if self.reserve
                else self.full_share * self.full_blocks + self.slide_share * self.slide_blocks
            )
            * self.inv_P
        )

    # --- the loop ---------------------------------------------------------------------------------
    def run(self, budget: WorkBudget | None = None) -> Records:
        """Simulate to the end; raises :class:`core.base.limits.BudgetExceeded` past the work budget."""
        budget = budget or WorkBudget()
        self._record()
        dh = self.dl_heap
        passes = 0
        while True:
            passes += 1
            if not passes & 1023 or self.now_s > budget.max_clock_s:
                budget.check(passes, self.now_s)
            if self.next_arr <= self.now_s:
                self._absorb_arrivals()
            if dh and dh[0][0] <= self.now_s:
                self._expire()
            if not self.running and not self.waiting:
                t = self.next_arr
                if t == INF:
                    break
                self._record(t)  # idle until the next arrival
                self.now_s = t
                continue
            self.step()
        return self.records()

    def records(self) -> Records:
        """What the run leaves behind, as plain arrays."""
        n = len(self.arr)
        return Records(
            arrival_s=array("d", self.arr),
            input_tokens=array("q", self.inp),
            output_tokens=array("q", self.out),
            status=array("b", self.status),
            admitted_s=array("d", self.admit_s),
            first_token_s=array("d", self.first_s),
            finish_s=array("d", self.fin_s),
            preemptions=array("l", self.npre[:n]),
            ts_s=self.ts_s,
            ts_waiting=self.ts_w,
            ts_running=self.ts_r,
            ts_kv_frac=self.ts_kv,
            busy_s=self.busy_s,
            prefill_s=self.prefill_s,
            iterations=self.iterations,
            total_preemptions=self.preemptions,
            last_arrival_s=self.last_arrival_s,
            adapters=self.lora.records(n, self.adapter_distinct_s) if self.lora is not None else None,
        )
