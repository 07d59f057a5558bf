"""The KV pool of one simulated replica: its capacity in blocks and what a sequence holds and reads.

The pool is in bytes, counted in blocks of ``block`` tokens at the per-token KV of all attention layers.
Sliding-window layers (Mistral, gpt-oss) hold at most their window, so a sequence of context ``c`` holds
``f ceil(c/B) + s ceil(min(c, w)/B)`` blocks-worth, with ``f`` and ``s`` the shares of full and sliding layers;
the attended pairs and cached reads use the same per-layer-average clipping. :func:`core.serving.kv_pool` sizes
it from the serving memory; :class:`core.serving.sim.engine.Engine` allocates from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pool:
    """The KV pool of one replica, in blocks of ``block`` tokens at the per-token KV of all layers."""

    blocks: float  # capacity [blocks-worth]; whole blocks for models without sliding layers
    block: int  # tokens per block
    full_share: float  # f: share of layers with full attention
    slide_share: float  # s: share of sliding-window layers
    window: int  # w [tokens]; 0 when there are no sliding layers
    max_context: int  # the model's context window [tokens]
    #: the most one sequence may hold [blocks-worth]: with data-parallel attention a sequence lives on one rank,
    #: so in one rank's share of the pool (pool / TP); the whole pool otherwise
    seq_blocks_max: float = float("inf")

    def blocks_for(self, c: int) -> float:
        """Blocks-worth held by one sequence of ``c`` cached tokens."""
        B = self.block
        v = self.full_share * ((c + B - 1) // B)
        if self.slide_share:
            v += self.slide_share * ((min(c, self.window) + B - 1) // B)
        return v

    def eff(self, c: float) -> float:
        """Per-layer-average tokens held or read at context ``c`` (``c`` without sliding layers)."""
        if not self.slide_share:
            return c
        return self.full_share * c + self.slide_share * min(c, self.window)

    def chunk_pairs(self, p: int, n: int) -> float:
        """Attended (query, key) pairs of a prefill chunk of ``n`` tokens after ``p`` cached ones."""
        full = n * p + n * (n + 1) / 2
        if not self.slide_share:
            return full
        w, a, b = self.window, p + 1, p + n
        if b <= w:
            clipped = full
        elif a > w:
            clipped = n * w
        else:
            clipped = (a + w) * (w - a + 1) / 2 + (b - w) * w
        return self.full_share * full + self.slide_share * clipped


def prefix_hit_tokens(frac: float, prompt_tokens):
    """Prompt tokens [tokens] a replica that has served a request's prefix group finds in its prefix cache: the
    group's shared first ``frac`` of the prompt, with at least the prompt's last token computed.

    .. math:: \\min(\\lfloor f \\cdot i \\rfloor,\\; i - 1)

    Half of a 1,000-token prompt shared: min(500, 999) = 500 tokens. ``prompt_tokens``: an int (an int back) or an
    int array (the Python loop asks per request, the compiled one for all at once; the same values).
    """
    hit = np.minimum(np.floor(frac * np.asarray(prompt_tokens)), np.asarray(prompt_tokens) - 1).astype(np.int64)
    return hit if hit.ndim else int(hit)
