"""The published cases under ``validation/``: where they live and how a file's rows are read."""

from __future__ import annotations

import csv
from pathlib import Path

VALIDATION_DIR = Path(__file__).resolve().parents[2] / "validation"


def raw_rows(name: str) -> list[dict[str, str]]:
    """The rows of ``validation/<name>`` as written (comment lines starting with ``#`` skipped)."""
    text = (VALIDATION_DIR / name).read_text()
    return list(csv.DictReader(line for line in text.splitlines() if line.strip() and not line.startswith("#")))
