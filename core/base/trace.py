"""Derivation steps: every estimate is a chain of named, re-checkable steps.

A formula function computes its value in plain Python and records it with
:meth:`Trace.step`: a key, a label, the Python expression over named inputs,
the inputs' values, the result and its unit. The dashboard's numbers and the
"show the math" page both read these steps, so they cannot drift, and a test
re-evaluates every recorded ``expr`` against its ``value``.

The hot paths (simulator, searches) pass :data:`NO_TRACE`, which records
nothing and costs one attribute lookup.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from core.base.units import fmt_value

#: LaTeX symbols for input names used across the formulas (the glossary).
SYMBOLS: dict[str, str] = {
    "P": "P",
    "P_act": r"P_{act}",
    "b_w": "b_w",
    "b_kv": r"b_{kv}",
    "b_a": "b_a",
    "tp": "t_p",
    "pp": "p_p",
    "ep": "e_p",
    "dp": "d_p",
    "L": "L",
    "L_kv": r"L_{kv}",
    "n_kv": r"n_{kv}",
    "n_kv_gpu": r"n_{kv}^{gpu}",
    "d_h": "d_h",
    "h": "h",
    "B": "B",
    "S": "S",
    "s_in": r"s_{in}",
    "s_out": r"s_{out}",
    "C": "C",
    "u": "u",
    "gpus": "G",
    "pi_flops": r"\pi_{flops}",
    "pi_att": r"\pi_{att}",
    "pi_bw": r"\pi_{bw}",
    "eta_bw": r"\eta_{bw}",
    "mfu": "MFU",
    "alpha": r"\alpha",
    "beta": r"\beta",
}


def _latex_symbol(name: str) -> str:
    if name in SYMBOLS:
        return SYMBOLS[name]
    if "_" in name:
        head, tail = name.split("_", 1)
        return f"{head}_{{{tail.replace('_', ',')}}}"
    return name


@dataclass(frozen=True)
class Step:
    """One named step of a derivation.

    Attributes:
        key: stable identifier, e.g. ``"weights_bytes_per_gpu"``.
        label: what a reader sees, e.g. ``"Weights per GPU"``.
        symbol: LaTeX symbol of the result, e.g. ``"W"``.
        expr: Python expression over ``inputs`` that reproduces ``value``.
        latex: LaTeX formula where ``[name]`` stands for the input ``name``.
        inputs: ``(name, value)`` pairs substituted into ``expr``.
        value: the result [``unit``].
        unit: ``"B"``, ``"s"``, ``"FLOP"``, ``"FLOP/s"``, ``"B/s"``, ``""`` ...
        note: one line on the assumption or source behind the step.
        input_units: ``(name, unit)`` pairs used to format substituted inputs.
    """

    key: str
    label: str
    symbol: str
    expr: str
    latex: str
    inputs: tuple[tuple[str, float], ...]
    value: float
    unit: str
    note: str = ""
    input_units: tuple[tuple[str, str], ...] = ()

    def evaluate(self) -> float:
        """Re-evaluate ``expr`` with the recorded inputs (used by tests)."""
        env = {
            "max": max,
            "min": min,
            "ceil": math.ceil,
            "floor": math.floor,
            "sqrt": math.sqrt,
            "log": math.log,
            "exp": math.exp,
        }
        return float(eval(self.expr, {"__builtins__": {}}, {**env, **dict(self.inputs)}))  # noqa: S307

    def latex_symbolic(self) -> str:
        body = re.sub(r"\[([A-Za-z0-9_]+)\]", lambda m: _latex_symbol(m.group(1)), self.latex)
        return f"{self.symbol} = {body}"

    def latex_substituted(self) -> str:
        units = dict(self.input_units)
        vals = dict(self.inputs)

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in vals:
                return _latex_symbol(name)
            return tex_text(fmt_value(vals[name], units.get(name, "")))

        body = re.sub(r"\[([A-Za-z0-9_]+)\]", sub, self.latex)
        return f"{self.symbol} = {body} = " + tex_text(fmt_value(self.value, self.unit))

    def shown(self) -> str:
        """The result as displayed everywhere in the app."""
        return fmt_value(self.value, self.unit)


def tex_text(text: str) -> str:
    """A formatted value as LaTeX text; the micro sign as KaTeX's own ``\\mu`` (KaTeX's text fonts have no "µ")."""
    return r"\text{" + text.replace("µ", r"}\mu\text{") + "}"


def _auto_latex(expr: str) -> str:
    out = re.sub(
        r"\b([A-Za-z_][A-Za-z0-9_]*)\b",
        lambda m: m.group(1) if m.group(1) in ("max", "min", "ceil", "floor") else f"[{m.group(1)}]",
        expr,
    )
    return out.replace("*", r" \cdot ")


@dataclass
class Trace:
    """Collects :class:`Step` records during one computation (never shared)."""

    steps: list[Step] = field(default_factory=list)
    enabled: bool = True

    def step(
        self,
        key: str,
        label: str,
        symbol: str,
        expr: str,
        value: float,
        *,
        unit: str = "",
        latex: str | None = None,
        note: str = "",
        units: dict[str, str] | None = None,
        **inputs: float,
    ) -> float:
        """Record a step and return ``value`` unchanged."""
        if not self.enabled:
            return value
        known_units = {s.key: s.unit for s in self.steps}
        iu = {n: known_units[n] for n in inputs if n in known_units}
        iu.update(units or {})
        self.steps.append(
            Step(
                key=key,
                label=label,
                symbol=symbol,
                expr=expr,
                latex=latex if latex is not None else _auto_latex(expr),
                inputs=tuple((k, float(v)) for k, v in inputs.items()),
                value=float(value),
                unit=unit,
                note=note,
                input_units=tuple(sorted(iu.items())),
            )
        )
        return value

    def frozen(self) -> tuple[Step, ...]:
        return tuple(self.steps)


class _NoTrace(Trace):
    def __init__(self) -> None:
        super().__init__(steps=[], enabled=False)


#: Records nothing: for the simulator and the searches.
NO_TRACE: Trace = _NoTrace()


def find(steps: tuple[Step, ...], key: str) -> Step:
    """The step named ``key`` (raises KeyError with the known keys)."""
    for s in steps:
        if s.key == key:
            return s
    raise KeyError(f"no step {key!r}; steps are {[s.key for s in steps]}")
