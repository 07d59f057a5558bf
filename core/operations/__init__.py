"""Operations: measured runs, telemetry, diagnosis, and launch configs.

The wing's face: it only hands on the names other wings and the edges use."""

from __future__ import annotations

from core.operations.diagnosis import (
    HISTOGRAMS,
    RULES,
    Diagnosis,
    Expectation,
    diagnose,
    expectation_of,
    measured_p95,
)
from core.operations.launch import (
    EMIT_CHOICES,
    FILE_NAMES,
    command,
    emit,
    k8s_manifest,
    launch_spec,
    model_repo,
)
from core.operations.runs import (
    CSV_COLUMNS,
    FAMILY_TEXT,
    METRICS,
    Run,
    RunError,
    csv_template,
    parse_csv,
    parse_file,
    parse_json,
    parse_rows,
)
from core.operations.telemetry import (
    MAX_BYTES,
    MAX_SAMPLES,
    Sample,
    Telemetry,
    TelemetryError,
    counter,
    from_payload,
    gauge,
    mean,
    parse,
    quantile,
    to_payload,
)

__all__ = [
    "CSV_COLUMNS",
    "Diagnosis",
    "EMIT_CHOICES",
    "Expectation",
    "FAMILY_TEXT",
    "FILE_NAMES",
    "HISTOGRAMS",
    "MAX_BYTES",
    "MAX_SAMPLES",
    "METRICS",
    "RULES",
    "Run",
    "RunError",
    "Sample",
    "Telemetry",
    "TelemetryError",
    "command",
    "counter",
    "csv_template",
    "diagnose",
    "emit",
    "expectation_of",
    "from_payload",
    "gauge",
    "k8s_manifest",
    "launch_spec",
    "model_repo",
    "mean",
    "measured_p95",
    "parse",
    "parse_csv",
    "parse_file",
    "parse_json",
    "parse_rows",
    "quantile",
    "to_payload",
]
