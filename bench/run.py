"""Run every benchmark module in ``bench/`` that defines ``run() -> list[tuple[str, float, str, str]]``.

Each row is (what, value, unit, target). Figures go to stdout as a table; the README quotes them.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    only = set(argv if argv is not None else sys.argv[1:])
    rows = []
    for mod in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if mod.name in ("run", "__init__") or (only and mod.name not in only):
            continue
        m = importlib.import_module(f"bench.{mod.name}")
        if hasattr(m, "run"):
            print(f"# {mod.name} ...", file=sys.stderr, flush=True)
            rows.extend(m.run())
    width = max((len(r[0]) for r in rows), default=10)
    print(f"{'benchmark':<{width}}  {'value':>12}  unit    target")
    for what, value, unit, target in rows:
        print(f"{what:<{width}}  {value:>12.4g}  {unit:<6}  {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
