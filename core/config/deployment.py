"""A config resolved once: the catalog entries it names, with its layout, precisions and assumptions.

:func:`resolve` looks the model, GPU and fabric up once (at the edge: a cached wrapper, a CLI command)
and the formulas take the result instead of looking them up again. These are the only catalog lookups
in ``core`` (:func:`model_of`, :func:`gpu_of`, :func:`fabric_of`). A :class:`Deployment` is frozen and
hashes and compares as the config it was resolved from, so it can key a cache.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from core import catalog
from core.base import KV_BYTES, WEIGHT_BYTES, Assumptions
from core.catalog import Fabric, GpuSpec, ModelArch

if TYPE_CHECKING:  # the config's own module imports the video group, which resolves through the lookups here
    from core.config.settings import RabitConfig


def model_of(cfg: RabitConfig) -> ModelArch:
    """The architecture a config names: an uploaded config.json wins over the catalog slug."""
    return cfg.custom_model if cfg.custom_model is not None else catalog.model(cfg.model)


def gpu_of(cfg: RabitConfig) -> GpuSpec:
    """The GPU a config names."""
    return catalog.gpu(cfg.gpu)


def fabric_of(cfg: RabitConfig) -> Fabric:
    """The inter-node fabric a config names."""
    return catalog.fabric(cfg.fabric)


@dataclass(frozen=True, eq=False)
class Deployment:
    """What runs where: architecture, GPU, fabric, layout, precisions and assumptions of one config."""

    config: RabitConfig
    model: ModelArch
    gpu: GpuSpec
    fabric: Fabric

    # --- the config's settings, by the names the formulas use ---------------------------------------------
    @property
    def tp(self) -> int:
        return self.config.tp

    @property
    def pp(self) -> int:
        return self.config.pp

    @property
    def ep(self) -> int:
        return self.config.ep

    @property
    def gpus_per_node(self) -> int:
        return self.config.gpus_per_node

    @property
    def weights(self) -> str:
        return self.config.weights

    @property
    def assumptions(self) -> Assumptions:
        return self.config.assumptions

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per parameter of the weight format, scales included [B]."""
        return WEIGHT_BYTES[self.config.weights]

    @property
    def kv_bytes_per_elem(self) -> float:
        """Bytes per cached K or V element [B]."""
        return KV_BYTES[self.config.kv_dtype]

    def with_(self, **changes: Any) -> Deployment:
        """The deployment of ``config.with_(**changes)``; the catalog is consulted again only when a change
        names another model, GPU or fabric."""
        cfg = self.config.with_(**changes)
        if changes.keys() & _LOOKUP_FIELDS:
            return resolve(cfg)
        return replace(self, config=cfg)

    def draft(self) -> Deployment:
        """The speculative draft model (``config.draft_model``) on this deployment's GPUs: one stage, no expert
        parallelism, and the largest TP that divides both this TP and the draft's heads."""
        dm = catalog.model(self.config.draft_model)
        tp = max(d for d in range(1, self.tp + 1) if self.tp % d == 0 and dm.splits_heads(d))
        cfg = self.config.with_(model=self.config.draft_model, custom_model=None, tp=tp, pp=1, ep=1)
        return replace(self, config=cfg, model=dm)

    def __hash__(self) -> int:
        return hash(self.config)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deployment) and other.config == self.config


def whole_nodes_problem(gpus: int, per_node: int) -> str | None:
    """Why ``gpus`` GPUs cannot be a cluster on nodes of ``per_node`` (None when they can): up to one node they
    share a single node, beyond it they must fill whole nodes. 8 per node: 12 -> "use 8 or 16"."""
    if gpus > per_node and gpus % per_node:
        lo = gpus // per_node * per_node
        return f"{gpus:,} GPUs is not a whole number of {per_node}-GPU nodes; use {lo:,} or {lo + per_node:,}"
    return None


def split_nodes(gpus: int, per_node: int) -> tuple[int, int]:
    """(GPUs per node, nodes) of a cluster of ``gpus`` GPUs on nodes of ``per_node``: one node holding them all
    up to a node's worth, whole nodes beyond; ``ValueError`` (:func:`whole_nodes_problem`) otherwise.
    8 per node: 4 -> (4, 1), 16 -> (8, 2)."""
    problem = whole_nodes_problem(gpus, per_node)
    if problem is not None:
        raise ValueError(problem)
    return (gpus, 1) if gpus <= per_node else (per_node, gpus // per_node)


#: Config fields the catalog lookups read.
_LOOKUP_FIELDS = frozenset({"model", "custom_model", "gpu", "fabric"})


def resolve(cfg: RabitConfig) -> Deployment:
    """Look up the catalog entries ``cfg`` names (an uploaded model wins over the catalog slug)."""
    return Deployment(config=cfg, model=model_of(cfg), gpu=gpu_of(cfg), fabric=fabric_of(cfg))


def as_deployment(x: Deployment | RabitConfig) -> Deployment:
    """``x`` itself when already resolved, else :func:`resolve` of it: entry points take either, so callers at
    the edge resolve once and pass the deployment down while a plain config keeps working."""
    return x if isinstance(x, Deployment) else resolve(x)
