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
    DOCUMENTED_FLAGS,
    EMIT_CHOICES,
    FILE_NAMES,
    LaunchSpec,
    command,
    emit,
    k8s_manifest,
    launch_spec,
    model_repo,
)
from core.operations.launch_disagg import (
    emit_pick,
)
from core.operations.log_compare import (
    LogComparison,
    calibrate_memory,
    compare_log,
    config_for_log,
    predict_numbers,
)
from core.operations.oom import COSTS, OomDiagnosis, diagnose_oom
from core.operations.run_rows import csv_template, parse_csv, parse_file, parse_rows
from core.operations.runs import (
    CSV_COLUMNS,
    FAMILY_TEXT,
    METRICS,
    Measurement,
    Run,
    RunError,
    parse_json,
)
from core.operations.startup_log import NUMBER_TEXT, NUMBERS, LogError, StartupLog, number_text, parse_log
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
    "COSTS",
    "DOCUMENTED_FLAGS",
    "emit_pick",
    "CSV_COLUMNS",
    "Diagnosis",
    "EMIT_CHOICES",
    "Expectation",
    "FAMILY_TEXT",
    "FILE_NAMES",
    "HISTOGRAMS",
    "LaunchSpec",
    "LogComparison",
    "LogError",
    "MAX_BYTES",
    "MAX_SAMPLES",
    "METRICS",
    "Measurement",
    "NUMBERS",
    "NUMBER_TEXT",
    "OomDiagnosis",
    "RULES",
    "Run",
    "RunError",
    "Sample",
    "StartupLog",
    "Telemetry",
    "TelemetryError",
    "calibrate_memory",
    "command",
    "compare_log",
    "config_for_log",
    "counter",
    "csv_template",
    "diagnose",
    "diagnose_oom",
    "emit",
    "expectation_of",
    "from_payload",
    "gauge",
    "k8s_manifest",
    "launch_spec",
    "model_repo",
    "mean",
    "measured_p95",
    "model_repo",
    "number_text",
    "parse",
    "parse_csv",
    "parse_file",
    "parse_json",
    "parse_log",
    "parse_rows",
    "predict_numbers",
    "quantile",
    "to_payload",
]
