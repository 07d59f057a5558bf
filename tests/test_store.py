# ruff: noqa: F811 - the store_url and pg_server fixtures are imported by name
"""The store on SQLite and PostgreSQL: revisions, optimistic concurrency, search, soft delete, export and
import, runs; a process killed inside a save; 20 concurrent writers (threads and processes)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select, text
from store_fixtures import pg_server, store_url  # noqa: F401 - fixtures

from core.config import RabitConfig
from core.operations import csv_template, parse_csv, to_payload
from core.operations import parse as parse_telemetry
from store import Conflict, NotFound, Store, StoreError
from store import db as store_db
from store.schema import analyses, revisions

ROOT = Path(__file__).resolve().parent.parent
WRITER = str(ROOT / "tests" / "store_writer.py")


def test_create_save_keeps_every_revision(store_url):
    s = Store(store_url)
    aid = s.create("H100 sizing", RabitConfig(), results={"prefill_s": 1.5}, note="first", saved_by="ana")
    assert s.get(aid).revision == 1
    r2 = s.save(aid, RabitConfig(gpu="h200-sxm", batch=64), expected_revision=1, saved_by="bo")
    assert r2 == 2
    a = s.get(aid)
    assert (a.config.gpu, a.config.batch, a.summary.gpu, a.note) == ("h200-sxm", 64, "h200-sxm", "first")
    assert [r.revision for r in a.revisions] == [2, 1]
    old = s.get(aid, revision=1)  # the earlier revision is still there, unchanged
    assert (old.config.gpu, old.results) == ("h100-sxm", {"prefill_s": 1.5})


def test_second_save_on_the_same_revision_is_told_and_can_save_a_new_one(store_url):
    s = Store(store_url)
    aid = s.create("shared", RabitConfig())
    s.save(aid, RabitConfig(batch=2), expected_revision=1, saved_by="first session")
    with pytest.raises(Conflict) as exc:
        s.save(aid, RabitConfig(batch=3), expected_revision=1, saved_by="second session")
    assert exc.value.current == 2 and "revision 3" in str(exc.value)
    assert s.get(aid).config.batch == 2  # nothing overwritten
    assert s.save(aid, RabitConfig(batch=3), expected_revision=exc.value.current, saved_by="second session") == 3
    assert [r.saved_by for r in s.get(aid).revisions] == ["second session", "first session", ""]


def test_list_search_rename_soft_delete_restore(store_url):
    s = Store(store_url)
    a = s.create("Llama serving", RabitConfig(model="llama-3.1-8b", gpu="l40s"))
    b = s.create("Big one", RabitConfig(model="llama-3.1-405b", gpu="b200"))
    assert {x.id for x in s.list()} == {a, b}
    assert [x.id for x in s.list("serving")] == [a]  # by name
    assert [x.id for x in s.list("405B")] == [b]  # by model, any case
    assert [x.id for x in s.list("l40s")] == [a]  # by GPU
    s.rename(a, "Llama on L40S")
    assert s.get(a).name == "Llama on L40S"
    s.delete(b)
    assert [x.id for x in s.list()] == [a]
    assert [x.id for x in s.list(deleted=True)] == [b]
    assert s.get(b).config.gpu == "b200"  # still readable in the bin
    s.restore(b)
    assert {x.id for x in s.list()} == {a, b}
    with pytest.raises(NotFound):
        s.rename("nope", "x")
    with pytest.raises(StoreError):
        s.create("   ", RabitConfig())


def test_runs_and_telemetry_attach_and_export_import_round_trip(store_url):
    s = Store(store_url)
    aid = s.create("with runs", RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", tp=1, gpus_per_node=1))
    s.save(
        aid,
        RabitConfig(model="llama-3.1-8b", gpu="h100-sxm", tp=1, gpus_per_node=1, batch=8),
        expected_revision=1,
        note="second",
    )
    runs = parse_csv(csv_template())
    ids = s.add_runs(aid, runs)
    assert len(ids) == len(runs)
    stored = to_payload(parse_telemetry(b"vllm:num_requests_waiting 3\n", "m.txt"))  # the form a file is stored in
    s.add_telemetry(aid, "prometheus", stored)
    a = s.get(aid)
    assert tuple(r.run for r in a.runs) == runs and a.telemetry[0]["payload"] == stored
    s.remove_run(aid, ids[0])
    assert len(s.get(aid).runs) == len(runs) - 1

    data = json.loads(json.dumps(s.export(aid)))  # through a file's worth of JSON
    bid = s.import_(data, saved_by="importer")
    b = s.get(bid)
    assert bid != aid and b.name == "with runs" and b.config == a.config
    assert [r.revision for r in b.revisions] == [2, 1] and b.note == "second"
    assert tuple(r.run for r in b.runs) == tuple(r.run for r in s.get(aid).runs)
    with pytest.raises(StoreError, match="not a RA-BIT analysis export"):
        s.import_({"name": "x"})
    bad = dict(data, revisions=[dict(data["revisions"][0], config={"gpu": 5})])
    n = len(s.list())
    with pytest.raises(StoreError, match="cannot be read"):
        s.import_(bad)
    assert len(s.list()) == n  # nothing half-imported


def test_migrations_run_once_and_are_idempotent(store_url):
    s1 = Store(store_url)
    aid = s1.create("kept", RabitConfig())
    store_db.migrate(store_db.engine(store_url))  # again: a no-op
    store_db.dispose_all()
    assert Store(store_url).get(aid).name == "kept"
    eng = create_engine(store_url)
    with eng.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0001"
    eng.dispose()


def _consistent(url: str) -> None:
    """Every analysis's current revision exists, revisions run 1..N without a gap, and all configs load."""
    eng = create_engine(url)
    with eng.connect() as c:
        if c.dialect.name == "sqlite":
            assert c.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
        rows = c.execute(select(analyses.c.id, analyses.c.revision)).all()
        for aid, rev in rows:
            revs = sorted(r for (r,) in c.execute(select(revisions.c.revision).where(revisions.c.analysis_id == aid)))
            assert revs == list(range(1, rev + 1)), (aid, rev, revs)
    eng.dispose()
    s = Store(url)
    for x in s.list():
        s.get(x.id)


def test_process_killed_inside_a_save_loses_nothing_committed(store_url):
    s = Store(store_url)
    keep = [s.create(f"committed {i}", RabitConfig(batch=i + 1)) for i in range(3)]
    target = keep[0]
    s.save(target, RabitConfig(batch=42), expected_revision=1)
    proc = subprocess.Popen(
        [sys.executable, WRITER, "hang", store_url, target, "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.time() + 120
        line = ""
        while time.time() < deadline and "IN-COMMIT" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                pytest.fail("writer exited early: " + proc.stderr.read())
        assert "IN-COMMIT" in line  # the save's rows are written, the commit has not happened
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    store_db.dispose_all()
    s = Store(store_url)
    a = s.get(target)
    assert (a.summary.revision, a.config.batch) == (2, 42)  # the killed save left no trace
    assert [x.name for x in s.list()] and {x.id for x in s.list()} == set(keep)
    assert s.save(target, RabitConfig(batch=43), expected_revision=2) == 3  # and the store takes writes
    _consistent(store_url)


def test_processes_killed_at_random_points_of_back_to_back_saves(store_url):
    s = Store(store_url)
    aid = s.create("hammered", RabitConfig())
    rng = random.Random(7)
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, WRITER, "loop", store_url, aid],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        try:
            first = proc.stdout.readline()  # saving has started
            assert first.startswith("saved"), first
            time.sleep(rng.uniform(0.05, 0.5))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        _consistent(store_url)
    assert Store(store_url).get(aid).summary.revision > 3


STRESS_S = float(os.environ.get("RABIT_STRESS_S", "30"))


@pytest.mark.stress
def test_twenty_concurrent_writers_lose_no_revision(store_url):
    """10 threads (one process, one engine) and 10 processes save and read for RABIT_STRESS_S seconds."""
    sys.path.insert(0, str(ROOT / "tests"))
    from store_writer import writer_loop

    s = Store(store_url)
    shared = [s.create(f"shared {i}", RabitConfig()) for i in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, WRITER, "stress", store_url, f"proc{i}", json.dumps(shared), str(STRESS_S)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(10)
    ]
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            results[name] = writer_loop(s, name, shared, STRESS_S, seed=len(name) * 31 + int(name[6:]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"thread{i}",)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=STRESS_S + 300)
    for i, p in enumerate(procs):
        out, err = p.communicate(timeout=STRESS_S + 300)
        assert p.returncode == 0, f"proc{i} failed: {err[-2000:]}"
        results[f"proc{i}"] = json.loads(out.strip().splitlines()[-1])
    assert not errors, errors
    assert len(results) == 20

    claimed = [(aid, rev) for r in results.values() for aid, rev, _ in r["saved"]]
    assert len(claimed) == len(set(claimed)), "two writers were told they saved the same revision"
    store_db.dispose_all()
    s = Store(store_url)
    eng = create_engine(store_url)
    with eng.connect() as c:
        stored = {(a, r) for a, r in c.execute(select(revisions.c.analysis_id, revisions.c.revision))}
        n_rows = c.execute(select(func.count()).select_from(revisions)).scalar_one()
    eng.dispose()
    initial = {(a, 1) for a in shared}
    assert stored == set(claimed) | initial and n_rows == len(claimed) + len(initial)  # no lost revision
    for r in results.values():  # each claimed revision holds what its writer saved
        for aid, rev, counter in r["saved"][:: max(1, len(r["saved"]) // 20)]:
            a = s.get(aid, revision=rev)
            assert a.config.batch == counter and a.revisions[0].revision >= rev
    total = len(claimed)
    conflicts = sum(r["conflicts"] for r in results.values())
    print(
        f"\n{store_url.split(':')[0]}: 20 writers, {STRESS_S:g} s: {total} revisions saved, {conflicts} conflicts "
        f"told and retried, {sum(r['reads'] for r in results.values())} reads"
    )
    assert total > 20 and sum(1 for r in results.values() if r["saved"]) == 20
    _consistent(store_url)


def test_an_analysis_saved_by_an_older_version_still_opens(store_url):
    """A config field this version no longer knows (and one it added since) does not make an analysis unreadable."""
    s = Store(store_url)
    aid = s.create("old", RabitConfig(batch=5))
    s.add_runs(aid, parse_csv(csv_template())[:1])
    eng = create_engine(store_url)
    with eng.begin() as c:
        for r, text_ in c.execute(select(revisions.c.revision, revisions.c.config_json)).all():
            data = json.loads(text_)
            data["retired_field"] = 1
            data.pop("workload", None)
            c.execute(
                revisions.update()
                .where(revisions.c.analysis_id == aid, revisions.c.revision == r)
                .values(config_json=json.dumps(data))
            )
        from store.schema import runs as runs_table

        for rid, text_ in c.execute(select(runs_table.c.id, runs_table.c.run_json)).all():
            data = json.loads(text_)
            data["config"]["retired_field"] = 1
            c.execute(runs_table.update().where(runs_table.c.id == rid).values(run_json=json.dumps(data)))
    eng.dispose()
    a = Store(store_url).get(aid)
    assert a.config.batch == 5 and len(a.runs) == 1
