"""A fleet description: many serving workloads, the scenarios a plan must survive, the constraints it must keep, and
how often each GPU kind fails.

One frozen model, :class:`Fleet`, read from a file (YAML or JSON, :func:`core.config.fleet_forms.parse_fleet`), from
the Fleet page's tables (:func:`core.config.fleet_forms.fleet_from_tables`) or from a link (the shared config's
``fleet`` field travels as one compressed blob). Every error names the workload (or scenario, site, GPU kind) and
the field, and says how to fix it (:class:`FleetError`). The smallest valid file (its field names are a contract)::

    workloads:
      - {name: chat, model: llama-3.1-70b, rate_per_s: 10, input_tokens: 1000, output_tokens: 250,
         p95_ttft_s: 2, p95_itl_s: 0.04}
      - {name: code, model: llama-3.1-8b, rate_per_s: 40, input_tokens: 2000, output_tokens: 400, p95_ttft_s: 1,
         p95_itl_s: 0.05}
    scenarios:
      - {name: peak, rate_factor: 1.3}
    constraints: {gpus: [h100-sxm, h200-sxm, mi300x]}

The schema (units in the names; a field left out takes the default in brackets):

``workloads`` (1 to 500), each:
  ``name``; ``model`` (a catalog slug) or ``config_json`` (a Hugging Face config.json, its path relative to the file);
  ``adapters`` [0] (LoRA adapters served over the base: carried with the workload);
  ``rate_per_s`` (the mean arrival rate) with ``peak_factor`` [1] or ``hourly_profile`` (24 relative rates): the plan
  is sized for the peak, ``rate_per_s x peak_factor`` or ``rate_per_s x max(profile) / mean(profile)``;
  ``input_tokens`` / ``output_tokens`` [4096 / 4096] (means) with ``lengths`` [fixed] (fixed, uniform, lognormal)
  and ``spread`` [0.5]; ``p95_ttft_s`` [2], ``p95_itl_s`` [0.04], ``p95_e2e_s`` [none]; ``priority`` [1] (1 is served
  first when the constraints cannot hold every workload); ``gpus`` [all] (the kinds this workload may use).
  Multi-turn sessions: ``agents`` and ``sessions`` [defaults] in place of ``rate_per_s`` and the lengths
  (:func:`core.config.sessions.agents_as_turns`).
``scenarios`` (up to 20), each: ``name``; ``rate_factor``, ``input_factor``, ``output_factor`` [1] (traffic and
  lengths scaled; ``workloads`` [all]: the names they apply to); ``withdraw`` (GPU kinds not available);
  ``cap`` ({kind: count}: at most that many of a kind); ``price_factor`` [1] and ``price_factors`` ({kind: factor}).
  The nominal case (the workloads as described) is always planned; the robust plan meets every scenario.
``constraints``: ``gpus`` [every priced kind] (the kinds the fleet may use); ``max_gpus`` ({kind: count}: the counts
  available); ``max_usd_per_hour``; ``sites`` (each ``name``, ``pue`` [1.58], ``power_budget_kw``, ``gpus``: the
  kinds hosted there; a site without ``gpus`` hosts every kind no other site names).
``availability`` ({kind: {failure_rate_per_gpu_hour, repair_hours}}): spare replicas so the targets hold with the
  expected share of nodes down.
``settings``: ``requests_per_simulation`` [2000], ``max_simulations`` [16], ``price_kind`` [on-demand],
  ``price_policy`` [median], ``ranges`` [true] (each pick's cost range at the assumptions' bounds).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core import catalog
from core.base import (
    CONFIG_DOMAINS,
    FLEET_DOMAINS,
    GROUP_DOMAINS,
    MAX_FLEET_SCENARIOS,
    MAX_FLEET_WORKLOADS,
    REGISTRY,
    choices,
    nearest,
)
from core.catalog import ModelArch
from core.config.sessions import Sessions, agents_as_turns
from core.config.workload import DEFAULT_INPUT_TOKENS, DEFAULT_LENGTH_SPREAD, DEFAULT_OUTPUT_TOKENS

#: A site's power usage effectiveness when the file names none: the Uptime Institute's industry average for 2023,
#: "In 2023, industry average PUE stood at 1.58" (Global Data Center Survey, UII Update 221, 23 Nov 2023; 1.56 in
#: 2024). Hyperscalers report 1.08-1.18 for their own fleets (AWS 1.15 in 2023, Meta 1.09 for 2021's buildings).
DEFAULT_PUE = 1.58
#: Hours in an hourly profile.
PROFILE_HOURS = 24
#: The name of the case every plan holds besides the file's scenarios: the workloads as described.
NOMINAL = "nominal"
#: A name: letters, digits, dots, dashes and underscores, starting with a letter or digit.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"

#: The smallest valid fleet file (issue 24's contract), the Fleet page's starting point.
EXAMPLE_YAML = """\
workloads:
  - {name: chat, model: llama-3.1-70b, rate_per_s: 10, input_tokens: 1000, output_tokens: 250,
     p95_ttft_s: 2, p95_itl_s: 0.04}
  - {name: code, model: llama-3.1-8b, rate_per_s: 40, input_tokens: 2000, output_tokens: 400, p95_ttft_s: 1,
     p95_itl_s: 0.05}
scenarios:
  - {name: peak, rate_factor: 1.3}
constraints: {gpus: [h100-sxm, h200-sxm, mi300x]}
"""


class FleetError(ValueError):
    """A fleet description that cannot be used; the message names the workload (or scenario, site, GPU kind) and
    the field, and says what is wrong."""


def _dom(key: str, default: Any = ...) -> Any:
    """A field with its one domain: a fleet field (core.base.limits.FLEET_DOMAINS), else the config's own field
    (``workload.rate_per_s``, ``targets.p95_ttft_s``, ``input_tokens``)."""
    d = FLEET_DOMAINS.get(key) or GROUP_DOMAINS.get(key) or CONFIG_DOMAINS[key]
    return Field(default, ge=d.lo, le=d.hi, allow_inf_nan=False)


class _F(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _pairs(v: Any) -> Any:
    """A ``{kind: value}`` mapping as sorted ``(kind, value)`` pairs (a frozen, hashable field); pairs pass."""
    if isinstance(v, dict):
        return tuple(sorted(v.items()))
    return v


def _kind_values(v: tuple[tuple[str, Any], ...], domain: str, what: str) -> tuple[tuple[str, Any], ...]:
    """``(kind, value)`` pairs whose kinds are the catalog's and whose values lie in ``FLEET_DOMAINS[domain]``."""
    _known_gpus(tuple(g for g, _ in v))
    d = FLEET_DOMAINS[domain]
    for g, x in v:
        d.check(f"{what} of {g}", x)
    return v


def _known_gpus(kinds: tuple[str, ...]) -> tuple[str, ...]:
    known = catalog.gpus()
    for g in kinds:
        if g not in known:
            near = nearest(g, known)
            raise ValueError(
                f"unknown GPU kind {g!r}"
                + (f" (did you mean {near}?)" if near else f"; known: {', '.join(sorted(known))}")
            )
    return kinds


class FleetWorkload(_F):
    """One serving workload of the fleet (see the module docstring for each field)."""

    name: str = Field(pattern=NAME_PATTERN)
    model: str | None = None
    config_json: str | None = None  # a path, read at the edge into ``custom_model``
    custom_model: ModelArch | None = None
    adapters: int = _dom("adapters", 0)
    rate_per_s: float = _dom("workload.rate_per_s")
    peak_factor: float = _dom("peak_factor", 1.0)
    hourly_profile: tuple[float, ...] = ()
    input_tokens: int = _dom("input_tokens", DEFAULT_INPUT_TOKENS)
    output_tokens: int = _dom("output_tokens", DEFAULT_OUTPUT_TOKENS)
    lengths: choices.LengthKind = "fixed"
    spread: float = _dom("workload.spread", DEFAULT_LENGTH_SPREAD)
    p95_ttft_s: float | None = _dom("targets.p95_ttft_s", 2.0)
    p95_itl_s: float | None = _dom("targets.p95_itl_s", 0.04)
    p95_e2e_s: float | None = _dom("targets.p95_e2e_s", None)
    priority: int = _dom("priority", 1)
    gpus: tuple[str, ...] = ()
    agents: int | None = Field(None, ge=1, le=1_000_000)  # a workload of sessions: concurrent agents
    sessions: Sessions | None = None  # their sessions (None with agents: the defaults)

    @model_validator(mode="before")
    @classmethod
    def _sessions_as_turns(cls, data: Any) -> Any:
        return agents_as_turns(data, cls.model_fields["p95_ttft_s"].default)

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str | None) -> str | None:
        if v is not None and v not in catalog.models():
            near = nearest(v, catalog.models())
            raise ValueError(f"unknown model {v!r}" + (f" (did you mean {near}?)" if near else "; see rabit models"))
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_gpus(v)

    @field_validator("hourly_profile")
    @classmethod
    def _profile(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not v:
            return v
        d = FLEET_DOMAINS["hourly_rate"]
        if len(v) != PROFILE_HOURS:
            raise ValueError(f"an hourly profile has {PROFILE_HOURS} values (one per hour), got {len(v)}")
        for i, x in enumerate(v):
            p = d.problem(x)
            if p is not None:
                raise ValueError(f"hour {i}: {p}")
        if sum(v) <= 0:
            raise ValueError("an hourly profile needs at least one hour with traffic")
        return v

    @model_validator(mode="after")
    def _one_model_one_peak(self) -> FleetWorkload:
        if self.model is None and self.custom_model is None and self.config_json is None:
            raise ValueError("give model (a catalog slug, see rabit models) or config_json (a config.json's path)")
        if self.model is not None and (self.custom_model is not None or self.config_json is not None):
            raise ValueError("give model or config_json, not both")
        if self.hourly_profile and self.peak_factor != 1.0:
            raise ValueError("give peak_factor or hourly_profile, not both")
        return self

    @property
    def model_label(self) -> str:
        if self.custom_model is not None:
            return self.custom_model.slug
        return self.model or str(self.config_json)

    @property
    def peak_over_mean(self) -> float:
        """The peak hour's rate over the mean rate (1 with neither a peak factor nor a profile)."""
        if self.hourly_profile:
            return max(self.hourly_profile) / (sum(self.hourly_profile) / len(self.hourly_profile))
        return self.peak_factor

    @property
    def design_rate_per_s(self) -> float:
        """The rate the plan is sized for: the peak [requests/s]."""
        return self.rate_per_s * self.peak_over_mean


class Scenario(_F):
    """One case the robust plan must also meet: traffic or lengths scaled, GPU kinds withdrawn or capped, prices
    changed (see the module docstring)."""

    name: str = Field(pattern=NAME_PATTERN)
    rate_factor: float = _dom("factor", 1.0)
    input_factor: float = _dom("factor", 1.0)
    output_factor: float = _dom("factor", 1.0)
    workloads: tuple[str, ...] = ()
    withdraw: tuple[str, ...] = ()
    cap: tuple[tuple[str, int], ...] = ()
    price_factor: float = _dom("factor", 1.0)
    price_factors: tuple[tuple[str, float], ...] = ()

    @field_validator("cap", "price_factors", mode="before")
    @classmethod
    def _mappings(cls, v: Any) -> Any:
        return _pairs(v)

    @field_validator("name")
    @classmethod
    def _not_nominal(cls, v: str) -> str:
        if v == NOMINAL:
            raise ValueError(f"'{NOMINAL}' is the workloads as described, always planned: name the scenario otherwise")
        return v

    @field_validator("withdraw")
    @classmethod
    def _withdraw_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_gpus(v)

    @field_validator("cap")
    @classmethod
    def _cap(cls, v: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
        return _kind_values(v, "gpu_count", "cap")

    @field_validator("price_factors")
    @classmethod
    def _price_factors(cls, v: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
        return _kind_values(v, "factor", "price factor")

    def applies_to(self, workload: str) -> bool:
        """Whether the scenario's traffic and length factors apply to ``workload``."""
        return not self.workloads or workload in self.workloads

    def price_of(self, gpu: str) -> float:
        """The factor on ``gpu``'s price in this scenario."""
        return self.price_factor * dict(self.price_factors).get(gpu, 1.0)


class Site(_F):
    """A site: its PUE, its power budget [kW] and the GPU kinds it hosts (none named: every kind no other site
    names)."""

    name: str = Field(pattern=NAME_PATTERN)
    pue: float = _dom("pue", DEFAULT_PUE)
    power_budget_kw: float | None = _dom("power_budget_kw", None)
    gpus: tuple[str, ...] = ()

    @field_validator("gpus")
    @classmethod
    def _gpus_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_gpus(v)


#: The site a fleet without sites runs at.
DEFAULT_SITE = Site(name="site")


class FleetConstraints(_F):
    """What the whole fleet must keep: the GPU kinds it may use and the counts available, a budget per hour, and
    each site's power budget."""

    gpus: tuple[str, ...] = ()
    max_gpus: tuple[tuple[str, int], ...] = ()
    max_usd_per_hour: float | None = _dom("targets.max_usd_per_hour", None)
    sites: tuple[Site, ...] = ()

    @field_validator("max_gpus", mode="before")
    @classmethod
    def _mappings(cls, v: Any) -> Any:
        return _pairs(v)

    @field_validator("gpus")
    @classmethod
    def _gpus_known(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _known_gpus(v)

    @field_validator("max_gpus")
    @classmethod
    def _counts(cls, v: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
        return _kind_values(v, "gpu_count", "max_gpus")

    @field_validator("sites")
    @classmethod
    def _sites(cls, v: tuple[Site, ...]) -> tuple[Site, ...]:
        _unique([s.name for s in v], "site")
        seen: dict[str, str] = {}
        for s in v:
            for g in s.gpus:
                if g in seen:
                    raise ValueError(f"{g} is hosted at two sites ({seen[g]} and {s.name}): name each kind once")
                seen[g] = s.name
        if sum(1 for s in v if not s.gpus) > 1:
            raise ValueError("at most one site may leave gpus empty (the site of every kind the others do not name)")
        return v

    @model_validator(mode="after")
    def _hosted(self) -> FleetConstraints:
        for g in self.gpus:
            if self.site_of(g) is None:
                raise ValueError(f"{g} is allowed but no site hosts it: add it to a site's gpus")
        return self

    def site_of(self, gpu: str) -> Site | None:
        """The site that hosts ``gpu`` (:data:`DEFAULT_SITE` when the fleet names no sites; None when the sites
        name their kinds and none names this one)."""
        if not self.sites:
            return DEFAULT_SITE
        for s in self.sites:
            if gpu in s.gpus:
                return s
        return next((s for s in self.sites if not s.gpus), None)


class GpuAvailability(_F):
    """How often one GPU kind fails and how long a repair takes."""

    gpu: str
    failure_rate_per_gpu_hour: float = _dom("failure_rate_per_gpu_hour", REGISTRY["failure_rate_per_gpu_hour"].base)
    repair_hours: float = _dom("repair_hours", 24.0)

    @field_validator("gpu")
    @classmethod
    def _known(cls, v: str) -> str:
        _known_gpus((v,))
        return v


class FleetSettings(_F):
    """How the plan's optimizer runs are made (each the optimizer's own settings) and whether each pick's cost is
    ranged at the assumptions' bounds."""

    requests_per_simulation: int = _dom("targets.requests_per_simulation", 2000)
    max_simulations: int = _dom("targets.max_simulations", 16)
    price_kind: choices.PriceKind = "on-demand"
    price_policy: choices.PricePolicy = "median"
    ranges: bool = True


class Fleet(_F):
    """A fleet description (see the module docstring)."""

    workloads: tuple[FleetWorkload, ...] = Field(min_length=1, max_length=MAX_FLEET_WORKLOADS)
    scenarios: tuple[Scenario, ...] = Field((), max_length=MAX_FLEET_SCENARIOS)
    constraints: FleetConstraints = FleetConstraints()
    availability: tuple[GpuAvailability, ...] = ()
    settings: FleetSettings = FleetSettings()

    @field_validator("availability", mode="before")
    @classmethod
    def _availability_map(cls, v: Any) -> Any:
        """``{kind: {failure_rate_per_gpu_hour, repair_hours}}`` as entries naming their kind."""
        if isinstance(v, dict):
            return tuple(
                {"gpu": g, **(x if isinstance(x, dict) else {"failure_rate_per_gpu_hour": x})}
                for g, x in sorted(v.items())
            )
        return v

    @model_validator(mode="after")
    def _names(self) -> Fleet:
        _unique([w.name for w in self.workloads], "workload")
        _unique([s.name for s in self.scenarios], "scenario")
        _unique([a.gpu for a in self.availability], "availability entry for GPU kind")
        names = {w.name for w in self.workloads}
        for s in self.scenarios:
            for n in s.workloads:
                if n not in names:
                    near = nearest(n, names)
                    raise ValueError(
                        f"scenario {s.name!r} names workload {n!r}, which the fleet does not have"
                        + (f" (did you mean {near}?)" if near else "")
                    )
        return self

    def workload(self, name: str) -> FleetWorkload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(f"no workload {name!r}")

    def availability_of(self, gpu: str) -> GpuAvailability | None:
        for a in self.availability:
            if a.gpu == gpu:
                return a
        return None

    def with_scenarios(self, names: tuple[str, ...] | None) -> Fleet:
        """The fleet with only the named scenarios (None: all); an unknown name is a :class:`FleetError`."""
        if names is None:
            return self
        known = [s.name for s in self.scenarios]
        for n in names:
            if n not in known:
                near = nearest(n, known)
                raise FleetError(
                    f"no scenario {n!r}"
                    + (f" (did you mean {near}?)" if near else f"; the file has: {', '.join(known) or 'none'}")
                )
        return self.model_copy(update={"scenarios": tuple(s for s in self.scenarios if s.name in names)})


def _unique(names: list[str], what: str) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise ValueError(f"two {what}s are named {n!r}: names must be unique")
        seen.add(n)
