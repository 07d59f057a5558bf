"""What a serving search is asked and what it weighs: the goal, the hard constraints, each candidate, a pick.

A :class:`ServingGoal` carries the workload and the p95 targets, and the shared config's settings every candidate
inherits (:func:`settings_of`: the model, fabric, block size, cached prefix share, speculative decoding, serving
engine and CUDA graphs, assumptions). :func:`candidate_deployment` resolves one candidate once: those settings
with the candidate's GPU kind, layout and precisions, looked up in the catalog one time, and handed on to every
formula the screen and the simulation run.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core import catalog
from core.base import Assumptions, choices
from core.catalog import ModelArch
from core.config import DEFAULT, Deployment, RabitConfig, Sessions, SimSpec, Targets, Workload, resolve
from core.serving import sim_spec

#: Target utilisation of each replica when sizing the replica count in closed form: queues need headroom
#: (M/D/1 waiting time grows as rho / (1 - rho); at 0.8 the queue stays short against second-scale targets).
SCREEN_UTILISATION = 0.8
#: Share of the p95 TTFT target (else of the end-to-end one) a request's mean wait for an adapter slot may take when
#: the screen chooses max_loras (multi-LoRA serving).
SCREEN_SLOT_WAIT_SHARE = 0.25
#: Formats the search tries (defined once in core.base.choices).
WEIGHT_FORMATS = choices.SEARCH_WEIGHT_FORMATS
KV_FORMATS = choices.SEARCH_KV_DTYPES

#: Config fields a goal's settings do not carry, each at its default: what the search sets for every candidate
#: (GPU kind, cluster, layout, precisions, the batch and the mean lengths from the workload), what the goal holds
#: itself (its workload and targets) and what serving does not read (the training run, the next experiment's
#: spreads, the Diagnostics page's predictions, the Fleet page's fleet). A change there leaves the goal, and a cached recommendation, as
#: they are.
NOT_INHERITED = (
    "gpu",
    "gpus_per_node",
    "nodes",
    "tp",
    "pp",
    "ep",
    "phase",
    "batch",
    "input_tokens",
    "output_tokens",
    "weights",
    "kv_dtype",
    "train_precision",
    "zero",
    "micro_batch",
    "seq_len",
    "recompute",
    "sequence_parallel",
    "tp_comm_overlap",
    "lora_rank",
    "qlora",
    "train_tokens",
    "global_batch_tokens",
    "targets",
    "training",
    "experiment",
    "predicted",
    "fleet",
)
#: Of the config's workload, what a candidate's step model reads (the engine's CUDA-graph capture size, eager
#: mode); the arrivals, lengths and scheduler are the goal's own :class:`SimSpec`.
INHERITED_WORKLOAD = ("engine", "cuda_graphs", "router")
#: Keyword shorthands of :class:`ServingGoal` for fields of its settings (``ServingGoal(model="llama-3.1-8b")``).
SETTING_SHORTHANDS = ("model", "custom_model", "assumptions", "fabric", "block_size")


def settings_of(cfg: RabitConfig) -> RabitConfig:
    """The settings of ``cfg`` a serving candidate inherits: every field but :data:`NOT_INHERITED`, which are
    left at their defaults, and of the workload only :data:`INHERITED_WORKLOAD`."""
    w = cfg.workload
    return cfg.model_copy(
        update={
            **{f: getattr(DEFAULT, f) for f in NOT_INHERITED},
            "workload": Workload().model_copy(update={f: getattr(w, f) for f in INHERITED_WORKLOAD}),
        }
    )


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServingGoal(_F):
    """What the service must do: the workload (its arrival rate is ``workload.rate_per_s``), and its p95
    targets [s] (None = no target); with the shared config's ``settings`` every candidate inherits.

    ``rate_per_s=`` is a shorthand for the workload's rate, and ``model=``, ``custom_model=``, ``assumptions=``,
    ``fabric=``, ``block_size=`` and ``cuda_graphs=`` for the settings' fields (one value, one home)."""

    # the default config's workload, with its requests per simulation (one default per field)
    workload: SimSpec = SimSpec(num_requests=Targets().requests_per_simulation)
    p95_ttft_s: float | None = Field(None, gt=0)
    p95_itl_s: float | None = Field(None, gt=0)
    p95_e2e_s: float | None = Field(None, gt=0)
    # the shared config's settings every candidate inherits (the sidebar's, or the CLI's --assume/--config)
    settings: RabitConfig = settings_of(DEFAULT)
    #: per GPU kind overrides of ``assumptions`` (slug, values): one accelerator measured faster or slower
    gpu_assumptions: tuple[tuple[str, Assumptions], ...] = ()
    #: multi-turn sessions to size for (agents running them back to back): each simulation runs them and the p95s
    #: are over every turn (:func:`core.decision.session_sizing.session_goal`); None: independent requests
    sessions: Sessions | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        """``rate_per_s=`` into the workload; the settings' shorthands into the settings."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "rate_per_s" in data:
            rate = data.pop("rate_per_s")
            spec = data.get("workload", cls.model_fields["workload"].default)
            data["workload"] = {**spec, "rate_per_s": rate} if isinstance(spec, dict) else spec.with_(rate_per_s=rate)
        changes = {k: data.pop(k) for k in SETTING_SHORTHANDS if k in data}
        if "cuda_graphs" in data:
            changes["cuda_graphs"] = data.pop("cuda_graphs")
        if changes:
            base = data.get("settings", cls.model_fields["settings"].default)
            base = RabitConfig.model_validate(base) if isinstance(base, dict) else base
            if "cuda_graphs" in changes:
                changes["workload"] = base.workload.with_(cuda_graphs=changes.pop("cuda_graphs"))
            data["settings"] = settings_of(base.with_(**changes))
        return data

    def with_(self, **changes: Any) -> ServingGoal:
        """A validated copy with some fields (or shorthands) changed."""
        return ServingGoal.model_validate({**dict(self), **changes})

    @property
    def rate_per_s(self) -> float:
        """Arrival rate the service must sustain [requests/s]."""
        return self.workload.rate_per_s

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def custom_model(self) -> ModelArch | None:
        return self.settings.custom_model

    @property
    def assumptions(self) -> Assumptions:
        return self.settings.assumptions

    @property
    def fabric(self) -> str:
        return self.settings.fabric

    @property
    def block_size(self) -> int:
        return self.settings.block_size

    @property
    def router(self) -> str:
        """The config's ``workload.router``: how the deployment's replicas are fed (core.serving.router)."""
        return self.settings.workload.router

    @property
    def cuda_graphs(self) -> bool:
        """The config's ``workload.cuda_graphs``: False = eager mode (launch configs say so)."""
        return self.settings.workload.cuda_graphs

    def arch(self) -> ModelArch:
        """The model's architecture (an uploaded config.json wins over the catalog slug)."""
        return self.custom_model if self.custom_model is not None else catalog.model(self.model)

    def assumptions_for(self, gpu: str) -> Assumptions:
        return dict(self.gpu_assumptions).get(gpu, self.assumptions)

    @classmethod
    def from_config(cls, cfg: RabitConfig) -> ServingGoal:
        """The goal the shared config describes: its workload (with ``targets.requests_per_simulation``
        requests per simulation), p95 targets and the settings every candidate inherits."""
        t = cfg.targets
        # the engine's own scheduler limits: a candidate with data-parallel attention scales them per rank itself
        spec = sim_spec(cfg.with_(dp_attention=False)).with_(num_requests=t.requests_per_simulation, duration_s=None)
        return cls(
            workload=spec,
            p95_ttft_s=t.p95_ttft_s,
            p95_itl_s=t.p95_itl_s,
            p95_e2e_s=t.p95_e2e_s,
            settings=settings_of(cfg),
        )


class Constraints(_F):
    """Hard constraints and the price basis."""

    gpus_allowed: tuple[str, ...] = ()  # empty: the whole catalog
    max_gpus: int | None = Field(None, ge=1)
    max_usd_per_hour: float | None = Field(None, gt=0)
    weights_allowed: tuple[str, ...] = WEIGHT_FORMATS
    kv_allowed: tuple[str, ...] = KV_FORMATS
    providers: tuple[str, ...] = ()
    price_kind: choices.PriceKind = "on-demand"
    price_policy: choices.PricePolicy = "median"
    max_simulations: int = Field(16, ge=1, le=64)
    #: the replica layouts (GPUs per replica, TP, PP, EP) the search may take; empty: every layout (a fleet plan
    #: sizes one configuration under each of its scenarios with this)
    layouts_allowed: tuple[tuple[int, int, int, int], ...] = ()
    disagg: bool = True  # also search disaggregated layouts (prefill and decode pools)
    #: only the disaggregated layout of these (prefill, decode) instance shapes (GPUs, TP, PP, EP), every
    #: aggregated one left out (a fleet plan sizes one disaggregated configuration under each of its scenarios)
    pools_allowed: tuple[tuple[int, int, int, int], tuple[int, int, int, int]] | None = None
    #: only disaggregated layouts whose prefill and decode pools are of these two GPU kinds (with
    #: ``pools_allowed``: a fleet plan sizing one mixed-kind configuration)
    pool_kinds: tuple[str, str] | None = None
    #: only disaggregated layouts whose two pools are of two different GPU kinds (a fleet plan's search over all
    #: its kinds at once, beside its per-kind runs, which cannot find them)
    mixed_pools: bool = False

    @classmethod
    def from_config(cls, cfg: RabitConfig, *, training: bool = False) -> Constraints:
        """The hard constraints of the shared config (``training``: the training run's GPU kinds)."""
        t = cfg.targets
        return cls(
            gpus_allowed=t.train_gpus_allowed if training else t.gpus_allowed,
            max_gpus=t.max_gpus,
            max_usd_per_hour=t.max_usd_per_hour,
            weights_allowed=t.weights_allowed,
            kv_allowed=t.kv_allowed,
            providers=t.providers,
            price_kind=t.price_kind,
            price_policy=t.price_policy,
            max_simulations=t.max_simulations,
            disagg=t.disagg,
        )


class _Replica(_F):
    """The shape of one serving replica."""

    gpu: str
    gpus_per_replica: int
    tp: int
    pp: int
    weights: str
    kv_dtype: str
    ep: int = 1  # expert parallelism (MoE): the routed experts spread over the TP ranks instead of split by TP
    #: multi-LoRA serving: the adapter slots (max_loras) the search chose for this replica; 0 = the config's own
    adapter_slots: int = Field(0, ge=0, exclude=True)
    # attention parallelism: data-parallel attention over the TP ranks, context parallelism over CP TP groups
    # (gpus_per_replica = TP x PP x CP), decode context parallelism over DCP of the TP ranks
    dp_attention: bool = False
    cp: int = 1
    dcp: int = 1

    def shape(self) -> tuple[str, int, int, int, bool, int, int, str, str]:
        """(GPU kind, GPUs per replica, TP, PP, DP attention, CP, DCP, weights, KV): what two picks of one
        configuration share."""
        return (
            self.gpu,
            self.gpus_per_replica,
            self.tp,
            self.pp,
            self.dp_attention,
            self.cp,
            self.dcp,
            self.weights,
            self.kv_dtype,
        )

    @property
    def attention_label(self) -> str:
        """The attention parallelism in words ("" for none)."""
        return (
            (", DP attention" if self.dp_attention else "")
            + (f", CP {self.cp}" if self.cp > 1 else "")
            + (f", DCP {self.dcp}" if self.dcp > 1 else "")
        )


class PoolChoice(_F):
    """One pool of a disaggregated layout: its instances and their shape, price and closed-form capacity."""

    role: str  # "prefill" or "decode"
    instances: int
    gpu: str
    gpus_per_instance: int
    tp: int
    pp: int
    ep: int = 1
    usd_per_gpu_hour: float
    capacity_per_instance_rps: float  # closed form: one-token requests (prefill), decodes at its batch cap
    max_num_seqs: int

    @property
    def cost_per_hour(self) -> float:
        return self.instances * self.gpus_per_instance * self.usd_per_gpu_hour

    @property
    def label(self) -> str:
        return f"{self.instances} {self.role} x {self.gpus_per_instance} {self.gpu} (TP {self.tp})"


class Candidate(_Replica):
    """One evaluated configuration (screened, and possibly simulated). A disaggregated one (``mode``) names its
    two pools; its own GPU kind and layout are its decode pool's, ``replicas`` counts both pools' instances."""

    usd_per_gpu_hour: float | None = None
    price_basis: str = ""
    price_unverified: bool = False
    pruned: str = ""  # why it left the search; empty if it survived the screen
    batch_1_ttft_s: float | None = None
    batch_1_itl_s: float | None = None
    screen_batch: int | None = None
    capacity_per_replica_rps: float | None = None
    replicas: int | None = None
    cost_per_hour: float | None = None
    simulated: bool = False
    meets: bool | None = None
    p95_ttft_s: float | None = None
    p95_itl_s: float | None = None
    p95_e2e_s: float | None = None
    bottleneck: str = ""
    sim_notes: str = ""
    mode: str = "aggregated"
    prefill: PoolChoice | None = None
    decode: PoolChoice | None = None
    # closed form, for pairing into disaggregated layouts: one instance of this shape as a prefill or decode pool
    prefill_capacity_rps: float | None = None
    decode_capacity_rps: float | None = None
    decode_batch: int | None = None
    decode_options: tuple[tuple[int, float], ...] = ()  # (batch cap, requests/s) of each decode batch weighed
    # simulated, disaggregated: each pool's busy share
    prefill_busy: float | None = None
    decode_busy: float | None = None
    prefill_queue_p95_s: float | None = None
    decode_queue_p95_s: float | None = None

    @property
    def cost(self) -> float:
        """The cost per hour the screen (or the simulation) sized [USD/h]; infinite before that."""
        return self.cost_per_hour if self.cost_per_hour is not None else math.inf

    @property
    def n_replicas(self) -> int:
        """The replicas the screen (or the simulation) sized; 1 before that."""
        return self.replicas or 1

    @property
    def label(self) -> str:
        if self.prefill is not None and self.decode is not None:
            return (
                f"disaggregated {self.prefill.label} + {self.decode.label} ({self.weights} weights, {self.kv_dtype} KV)"
            )
        layout = (
            f"TP {self.tp}"
            + (f" x PP {self.pp}" if self.pp > 1 else "")
            + (f", EP {self.ep}" if self.ep > 1 else "")
            + self.attention_label
        )
        n = f"{self.replicas} replica{'s' if self.replicas != 1 else ''} of " if self.replicas else ""
        slots = f", max_loras {self.adapter_slots}" if self.adapter_slots else ""
        return f"{n}{self.gpus_per_replica} x {self.gpu} ({layout}, {self.weights} weights, {self.kv_dtype} KV{slots})"


class Pick(_Replica):
    """A recommended (or alternative) configuration with the figures the CLI contract names."""

    replicas: int
    cost_per_hour: float
    cost_per_million_tokens: float
    p95_ttft_s: float | None
    p95_itl_s: float | None
    p95_e2e_s: float | None
    capacity_requests_per_s: float
    bottleneck: str
    meets_target: bool
    label: str
    max_num_seqs: int = 0  # the batch cap the screen chose and the simulation ran with (engine max_num_seqs)
    mode: str = "aggregated"  # or "disaggregated": the prefill and decode pools below
    prefill: PoolChoice | None = None
    decode: PoolChoice | None = None


def candidate_config(goal: ServingGoal, c: _Replica, assumptions: Assumptions | None = None) -> RabitConfig:
    """The config of one candidate: the goal's settings with its GPU kind, layout and precisions, batch 1 and
    the workload's mean lengths (``assumptions``: instead of the goal's for that GPU kind)."""
    g = catalog.gpu(c.gpu)
    gpn = min(c.gpus_per_replica, g.scale_up_domain)
    i, o = goal.workload.mean_lengths()
    slots = (
        {"adapters": goal.settings.adapters.with_slots(c.adapter_slots, goal.settings.workload.engine)}
        if c.adapter_slots
        else {}
    )
    return goal.settings.with_(
        **slots,
        gpu=c.gpu,
        gpus_per_node=gpn,
        nodes=max(1, c.gpus_per_replica // gpn),
        tp=c.tp,
        pp=c.pp,
        ep=c.ep,
        dp_attention=c.dp_attention,
        cp=c.cp,
        dcp=c.dcp,
        weights=c.weights,
        kv_dtype=c.kv_dtype,
        batch=1,
        input_tokens=max(1, round(i)),
        output_tokens=max(1, round(o)),
        assumptions=assumptions if assumptions is not None else goal.assumptions_for(c.gpu),
    )


def candidate_deployment(goal: ServingGoal, c: _Replica, assumptions: Assumptions | None = None) -> Deployment:
    """One candidate resolved once (:func:`candidate_config`, looked up in the catalog): what the screen, the
    simulation and the ranges hand to every formula."""
    return resolve(candidate_config(goal, c, assumptions))


def _ratio(value: float | None, target: float | None) -> float:
    if target is None:
        return 0.0
    if value is None:
        return math.inf
    return value / target


def meets(c: Candidate, goal: ServingGoal) -> bool:
    """Whether every p95 of ``c`` is within its target (a withheld p95 misses)."""
    return all(
        _ratio(v, t) <= 1.0
        for v, t in ((c.p95_ttft_s, goal.p95_ttft_s), (c.p95_itl_s, goal.p95_itl_s), (c.p95_e2e_s, goal.p95_e2e_s))
    )


def worst_ratio(c: Candidate, goal: ServingGoal) -> float:
    """The largest p95 / target of ``c`` (0 without targets)."""
    return max(
        _ratio(c.p95_ttft_s, goal.p95_ttft_s), _ratio(c.p95_itl_s, goal.p95_itl_s), _ratio(c.p95_e2e_s, goal.p95_e2e_s)
    )
