"""A separate process that writes to the store, for the kill-in-the-middle and concurrent-writer tests.

python tests/store_writer.py hang URL ANALYSIS_ID REVISION   # save, then block inside the commit
python tests/store_writer.py loop URL ANALYSIS_ID            # save revisions back to back forever
python tests/store_writer.py stress URL NAME SHARED_IDS SECONDS   # see writer_loop; prints JSON records
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.config import RabitConfig
from store import Conflict, Store


def writer_loop(store: Store, name: str, shared: list[str], seconds: float, seed: int) -> dict:
    """Save and read for ``seconds``: revisions on the shared analyses (retrying on Conflict) and on
    analyses of its own. Returns ``{"saved": [[id, revision, batch], ...], "conflicts": n, "reads": n}``;
    any exception other than Conflict propagates (the test fails on it)."""
    rng = random.Random(seed)
    saved: list[list] = []
    own: list[tuple[str, int]] = []
    conflicts = reads = 0
    counter = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        counter += 1
        cfg = RabitConfig(batch=counter, input_tokens=1 + rng.randrange(8192))
        roll = rng.random()
        if roll < 0.5 and shared:
            aid = rng.choice(shared)
            while True:
                cur = store.get(aid).summary.revision
                reads += 1
                try:
                    rev = store.save(aid, cfg, expected_revision=cur, saved_by=name, note=f"{name} {counter}")
                    break
                except Conflict:
                    conflicts += 1
            saved.append([aid, rev, counter])
        elif roll < 0.6 or not own:
            aid = store.create(f"{name} own {counter}", cfg, saved_by=name)
            own.append((aid, 1))
            saved.append([aid, 1, counter])
        elif roll < 0.85:
            i = rng.randrange(len(own))
            aid, rev = own[i]
            rev = store.save(aid, cfg, expected_revision=rev, saved_by=name)
            own[i] = (aid, rev)
            saved.append([aid, rev, counter])
        else:
            store.list(name)
            a = store.get(rng.choice(shared) if shared else own[0][0])
            assert a.config is not None
            reads += 2
    return {"saved": saved, "conflicts": conflicts, "reads": reads}


def main() -> None:
    mode, url = sys.argv[1], sys.argv[2]
    store = Store(url)
    if mode == "hang":
        from sqlalchemy import event

        aid, rev = sys.argv[3], int(sys.argv[4])

        def _block(conn) -> None:
            print("IN-COMMIT", flush=True)
            time.sleep(120)

        event.listen(store._engine, "commit", _block)
        print("SAVING", flush=True)
        store.save(aid, RabitConfig(batch=777), expected_revision=rev, saved_by="killed", note="never committed")
        print("COMMITTED?!", flush=True)
    elif mode == "loop":
        aid = sys.argv[3]
        n = 0
        while True:
            cur = store.get(aid).summary.revision
            store.save(aid, RabitConfig(batch=1 + n % 4096), expected_revision=cur, saved_by="looper")
            n += 1
            print(f"saved {cur + 1}", flush=True)
    elif mode == "stress":
        name, shared, seconds = sys.argv[3], json.loads(sys.argv[4]), float(sys.argv[5])
        print(json.dumps(writer_loop(store, name, shared, seconds, seed=sum(name.encode()))), flush=True)


if __name__ == "__main__":
    main()
