"""Saved analyses: create, save a new revision (optimistic concurrency), list and search, rename,
soft delete and restore, attach runs, telemetry and engine start-up logs, export and import.

Nothing is overwritten: every save adds a row to ``revisions``; the analysis row's ``revision`` is the
token a writer must present (``expected_revision``). The update that bumps it and the insert of the new
revision are one transaction, so a writer killed in between leaves the previous revision current and
readable, and of two writers holding the same token exactly one wins; the other gets :class:`Conflict`
with the current revision and may save again on top of it (a new revision, nothing lost).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, func, insert, or_, select, update

from core.base import MAX_ANALYSIS_BYTES, MAX_NAME_CHARS, MAX_NOTE_CHARS, text_problem
from core.config import RabitConfig, describe_validation_error
from core.operations import Run, StartupLog, TelemetryError, from_payload
from store import db
from store.schema import analyses, revisions, runs, startup_logs, telemetry

#: ``export`` writes this format tag; ``import_`` checks it.
EXPORT_FORMAT = "rabit-analysis/1"
#: A start-up log's text is kept up to this many characters (its numbers are kept whatever its size): a
#: start-up is a few hundred lines (30-200 kB), and an export must stay importable (``rabit analyses import``
#: reads at most 1 MB).
MAX_STORED_LOG_CHARS = 250_000


class StoreError(ValueError):
    """Bad input to the store (an unknown id, a malformed import); the message says which."""


class NotFound(StoreError):
    pass


class Conflict(StoreError):
    """Someone saved this analysis since it was opened."""

    def __init__(self, analysis_id: str, expected: int, current: int) -> None:
        super().__init__(
            f"analysis {analysis_id} was saved by someone else meanwhile: you opened revision "
            f"{expected}, the current one is {current}; save again to add yours as revision "
            f"{current + 1}"
        )
        self.analysis_id, self.expected, self.current = analysis_id, expected, current


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load_config(text: str) -> RabitConfig:
    """A saved config; fields this version no longer knows are dropped rather than refusing the analysis."""
    try:
        return RabitConfig.model_validate_json(text)
    except ValidationError:
        data = {k: v for k, v in json.loads(text).items() if k in RabitConfig.model_fields}
        try:
            return RabitConfig.model_validate(data)
        except ValidationError as exc:
            raise StoreError(f"saved config cannot be read: {describe_validation_error(exc)}") from None


def load_run(text: str) -> Run:
    """A saved run; config fields this version no longer knows are dropped (like :func:`load_config`)."""
    try:
        return Run.model_validate_json(text)
    except ValidationError:
        data = json.loads(text)
        data["config"] = load_config(json.dumps(data.get("config", {}))).model_dump()
        try:
            return Run.model_validate(data)
        except ValidationError as exc:
            raise StoreError(f"saved run cannot be read: {describe_validation_error(exc)}") from None


def _new_id(res: Any) -> int:
    """The id the database gave the row an insert wrote."""
    key = res.inserted_primary_key
    if key is None:
        raise StoreError("the database returned no id for the new row")
    return int(key[0])


@dataclass(frozen=True)
class Summary:
    """One row of the list."""

    id: str
    name: str
    model: str
    gpu: str
    revision: int
    owner: str | None
    saved_by: str
    created_at: str
    updated_at: str
    deleted_at: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "model": self.model,
            "gpu": self.gpu,
            "updated_at": self.updated_at,
            "created_at": self.created_at,
            "revision": self.revision,
            "owner": self.owner,
            "saved_by": self.saved_by,
            "deleted": self.deleted_at is not None,
        }


@dataclass(frozen=True)
class RevisionInfo:
    revision: int
    name: str
    saved_by: str
    created_at: str
    note: str

    def as_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "name": self.name,
            "saved_by": self.saved_by,
            "created_at": self.created_at,
            "note": self.note,
        }


@dataclass(frozen=True)
class StoredRun:
    id: int
    run: Run
    created_at: str

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at, **self.run.model_dump(mode="json")}


@dataclass(frozen=True)
class Analysis:
    """An analysis at one revision, with its runs, telemetry count and revision history."""

    summary: Summary
    config: RabitConfig
    results: dict[str, Any]
    note: str
    revision: int  # the revision shown (the current one unless asked otherwise)
    runs: tuple[StoredRun, ...] = ()
    revisions: tuple[RevisionInfo, ...] = ()
    telemetry: tuple[dict[str, Any], ...] = field(default=())
    #: attached start-up logs: {"id", "name", "engine", "created_at", "log" (a StartupLog), "text"}
    logs: tuple[dict[str, Any], ...] = field(default=())

    @property
    def id(self) -> str:
        return self.summary.id

    @property
    def name(self) -> str:
        return self.summary.name

    def as_json(self) -> dict[str, Any]:
        """``rabit analyses show``: the analysis with its ``config``, ``runs`` and ``revisions``."""
        return {
            **self.summary.as_json(),
            "shown_revision": self.revision,
            "note": self.note,
            "config": self.config.model_dump(mode="json"),
            "results": self.results,
            "runs": [r.as_json() for r in self.runs],
            "revisions": [r.as_json() for r in self.revisions],
            "telemetry": list(self.telemetry),
            "startup_logs": [
                {k: (v.as_json() if k == "log" else v) for k, v in lg.items() if k != "text"} for lg in self.logs
            ],
        }


def _summary(row) -> Summary:
    return Summary(
        id=row.id,
        name=row.name,
        model=row.model,
        gpu=row.gpu,
        revision=row.revision,
        owner=row.owner,
        saved_by=row.saved_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        deleted_at=row.deleted_at,
    )


class Store:
    """The analyses in one database (``url``: see :func:`store.db.database_url`)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url or db.database_url()
        self._engine: Engine = db.engine(self.url)
        self._read = self._engine.execution_options(rabit_read=True)

    @property
    def where(self) -> str:
        return db.describe(self.url)

    # --- writes ---------------------------------------------------------------------------------
    def create(
        self,
        name: str,
        config: RabitConfig,
        *,
        results: dict[str, Any] | None = None,
        note: str = "",
        saved_by: str = "",
        owner: str | None = None,
    ) -> str:
        """A new analysis at revision 1; returns its id."""
        name = _check_name(name)
        note, saved_by = _check_note(note), _check_line(saved_by, "saved by")
        owner = None if owner is None else _check_line(owner, "owner")
        t = now()
        aid = secrets.token_hex(6)
        with self._engine.begin() as c:
            c.execute(
                insert(analyses).values(
                    id=aid,
                    name=name,
                    model=config.model_label,
                    gpu=config.gpu,
                    owner=owner,
                    saved_by=saved_by,
                    revision=1,
                    created_at=t,
                    updated_at=t,
                    deleted_at=None,
                )
            )
            c.execute(
                insert(revisions).values(
                    analysis_id=aid,
                    revision=1,
                    name=name,
                    config_json=config.model_dump_json(),
                    results_json=json.dumps(results or {}),
                    note=note,
                    saved_by=saved_by,
                    created_at=t,
                )
            )
        return aid

    def save(
        self,
        analysis_id: str,
        config: RabitConfig,
        *,
        expected_revision: int,
        name: str | None = None,
        results: dict[str, Any] | None = None,
        note: str | None = None,
        saved_by: str = "",
    ) -> int:
        """Save a new revision on top of ``expected_revision``; returns the new revision number.

        Raises :class:`Conflict` when the analysis moved on since ``expected_revision`` (nothing is written).
        """
        note = None if note is None else _check_note(note)
        saved_by = _check_line(saved_by, "saved by")
        t = now()
        with self._engine.begin() as c:
            row = c.execute(select(analyses).where(analyses.c.id == analysis_id)).first()
            if row is None:
                raise NotFound(f"no analysis with id {analysis_id!r}")
            if row.revision != expected_revision:
                raise Conflict(analysis_id, expected_revision, row.revision)
            prev = c.execute(
                select(revisions.c.note).where(
                    revisions.c.analysis_id == analysis_id, revisions.c.revision == row.revision
                )
            ).scalar_one()
            new = expected_revision + 1
            name = _check_name(name) if name is not None else row.name
            _check_room(c, analysis_id, len(config.model_dump_json()) + len(json.dumps(results or {})))
            res = c.execute(
                update(analyses)
                .where(analyses.c.id == analysis_id, analyses.c.revision == expected_revision)
                .values(
                    revision=new, name=name, model=config.model_label, gpu=config.gpu, saved_by=saved_by, updated_at=t
                )
            )
            if res.rowcount != 1:  # another transaction bumped it between our read and this update
                current = c.execute(select(analyses.c.revision).where(analyses.c.id == analysis_id)).scalar_one()
                raise Conflict(analysis_id, expected_revision, current)
            c.execute(
                insert(revisions).values(
                    analysis_id=analysis_id,
                    revision=new,
                    name=name,
                    config_json=config.model_dump_json(),
                    results_json=json.dumps(results or {}),
                    note=prev if note is None else note,
                    saved_by=saved_by,
                    created_at=t,
                )
            )
        return new

    def rename(self, analysis_id: str, name: str) -> None:
        name = _check_name(name)
        with self._engine.begin() as c:
            if (
                c.execute(
                    update(analyses).where(analyses.c.id == analysis_id).values(name=name, updated_at=now())
                ).rowcount
                != 1
            ):
                raise NotFound(f"no analysis with id {analysis_id!r}")

    def delete(self, analysis_id: str) -> None:
        """Soft delete: hidden from the list, restorable with :meth:`restore`."""
        self._set_deleted(analysis_id, now())

    def restore(self, analysis_id: str) -> None:
        self._set_deleted(analysis_id, None)

    def _set_deleted(self, analysis_id: str, when: str | None) -> None:
        with self._engine.begin() as c:
            if c.execute(update(analyses).where(analyses.c.id == analysis_id).values(deleted_at=when)).rowcount != 1:
                raise NotFound(f"no analysis with id {analysis_id!r}")

    def add_runs(self, analysis_id: str, new_runs: tuple[Run, ...] | list[Run]) -> tuple[int, ...]:
        """Attach runs (all or none); returns their ids."""
        t = now()
        ids = []
        with self._engine.begin() as c:
            if c.execute(select(analyses.c.id).where(analyses.c.id == analysis_id)).first() is None:
                raise NotFound(f"no analysis with id {analysis_id!r}")
            _check_room(c, analysis_id, sum(len(r.model_dump_json()) for r in new_runs))
            for r in new_runs:
                res = c.execute(
                    insert(runs).values(
                        analysis_id=analysis_id,
                        label=r.label[:200],
                        source=r.source,
                        run_json=r.model_dump_json(),
                        created_at=t,
                    )
                )
                ids.append(_new_id(res))
            c.execute(update(analyses).where(analyses.c.id == analysis_id).values(updated_at=t))
        return tuple(ids)

    def remove_run(self, analysis_id: str, run_id: int) -> None:
        with self._engine.begin() as c:
            if c.execute(runs.delete().where(runs.c.analysis_id == analysis_id, runs.c.id == run_id)).rowcount != 1:
                raise NotFound(f"analysis {analysis_id!r} has no run {run_id}")

    def add_telemetry(self, analysis_id: str, kind: str, payload: dict[str, Any]) -> int:
        """Attach telemetry in its stored form (:func:`core.operations.to_payload`); refused, with nothing
        written, when the analysis would outgrow :data:`core.base.payloads.MAX_ANALYSIS_BYTES`."""
        try:
            if from_payload(payload).fmt != kind:
                raise StoreError(f"telemetry of kind {kind!r} holds a payload of kind {payload.get('format')!r}")
        except TelemetryError as exc:
            raise StoreError(str(exc)) from None
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
        with self._engine.begin() as c:
            if c.execute(select(analyses.c.id).where(analyses.c.id == analysis_id)).first() is None:
                raise NotFound(f"no analysis with id {analysis_id!r}")
            _check_room(c, analysis_id, len(text))
            res = c.execute(
                insert(telemetry).values(analysis_id=analysis_id, kind=kind, payload_json=text, created_at=now())
            )
            return _new_id(res)

    def add_log(self, analysis_id: str, name: str, log: StartupLog, text: str) -> int:
        """Attach a parsed start-up log (its numbers, and its text up to :data:`MAX_STORED_LOG_CHARS`)."""
        with self._engine.begin() as c:
            if c.execute(select(analyses.c.id).where(analyses.c.id == analysis_id)).first() is None:
                raise NotFound(f"no analysis with id {analysis_id!r}")
            name = _check_line(name, "the log's name") or "start-up log"
            stored = text[:MAX_STORED_LOG_CHARS]
            _check_room(c, analysis_id, len(log.model_dump_json()) + len(stored))
            res = c.execute(
                insert(startup_logs).values(
                    analysis_id=analysis_id,
                    name=name,
                    engine=log.engine,
                    payload_json=log.model_dump_json(),
                    text=stored,
                    created_at=now(),
                )
            )
            c.execute(update(analyses).where(analyses.c.id == analysis_id).values(updated_at=now()))
            return _new_id(res)

    def remove_log(self, analysis_id: str, log_id: int) -> None:
        with self._engine.begin() as c:
            q = startup_logs.delete().where(startup_logs.c.analysis_id == analysis_id, startup_logs.c.id == log_id)
            if c.execute(q).rowcount != 1:
                raise NotFound(f"analysis {analysis_id!r} has no start-up log {log_id}")

    # --- reads ----------------------------------------------------------------------------------
    def list(
        self, search: str = "", *, deleted: bool = False, owner: str | None = None, limit: int = 500
    ) -> tuple[Summary, ...]:
        """Newest first; ``search`` matches name, model or GPU (case-insensitive); ``deleted``: the bin."""
        q = select(analyses)
        q = q.where(analyses.c.deleted_at.is_not(None) if deleted else analyses.c.deleted_at.is_(None))
        if owner is not None:
            q = q.where(analyses.c.owner == owner)
        s = search.strip().lower()
        if s:  # the text itself: % and _ match only themselves (escaped), never "anything"
            like = "%" + s.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            q = q.where(
                or_(
                    func.lower(analyses.c.name).like(like, escape="\\"),
                    func.lower(analyses.c.model).like(like, escape="\\"),
                    func.lower(analyses.c.gpu).like(like, escape="\\"),
                )
            )
        q = q.order_by(analyses.c.updated_at.desc(), analyses.c.id).limit(limit)
        with self._read.connect() as c:
            return tuple(_summary(r) for r in c.execute(q))

    def get(self, analysis_id: str, revision: int | None = None, *, include_deleted: bool = True) -> Analysis:
        """The analysis at its current revision (or ``revision``), with runs and history."""
        with self._read.begin() as c:
            row = c.execute(select(analyses).where(analyses.c.id == analysis_id)).first()
            if row is None or (row.deleted_at is not None and not include_deleted):
                raise NotFound(f"no analysis with id {analysis_id!r}")
            want = row.revision if revision is None else revision
            rev = c.execute(
                select(revisions).where(revisions.c.analysis_id == analysis_id, revisions.c.revision == want)
            ).first()
            if rev is None:
                raise NotFound(f"analysis {analysis_id!r} has no revision {want}")
            hist = c.execute(
                select(
                    revisions.c.revision,
                    revisions.c.name,
                    revisions.c.saved_by,
                    revisions.c.created_at,
                    revisions.c.note,
                )
                .where(revisions.c.analysis_id == analysis_id)
                .order_by(revisions.c.revision.desc())
            ).all()
            run_rows = c.execute(select(runs).where(runs.c.analysis_id == analysis_id).order_by(runs.c.id)).all()
            tel = c.execute(
                select(telemetry).where(telemetry.c.analysis_id == analysis_id).order_by(telemetry.c.id)
            ).all()
            log_rows = c.execute(
                select(startup_logs).where(startup_logs.c.analysis_id == analysis_id).order_by(startup_logs.c.id)
            ).all()
        return Analysis(
            summary=_summary(row),
            config=load_config(rev.config_json),
            results=json.loads(rev.results_json),
            note=rev.note,
            revision=want,
            runs=tuple(StoredRun(id=r.id, run=load_run(r.run_json), created_at=r.created_at) for r in run_rows),
            revisions=tuple(
                RevisionInfo(
                    revision=h.revision, name=h.name, saved_by=h.saved_by, created_at=h.created_at, note=h.note
                )
                for h in hist
            ),
            telemetry=tuple(
                {"id": t.id, "kind": t.kind, "created_at": t.created_at, "payload": json.loads(t.payload_json)}
                for t in tel
            ),
            logs=tuple(_stored_log(r) for r in log_rows),
        )

    def revision_count(self, analysis_id: str) -> int:
        with self._read.connect() as c:
            return int(
                c.execute(
                    select(func.count()).select_from(revisions).where(revisions.c.analysis_id == analysis_id)
                ).scalar_one()
            )

    # --- files ----------------------------------------------------------------------------------
    def export(self, analysis_id: str) -> dict[str, Any]:
        """The analysis with every revision, run and telemetry record, as one JSON-able object."""
        a = self.get(analysis_id)
        with self._read.connect() as c:
            revs = c.execute(
                select(revisions).where(revisions.c.analysis_id == analysis_id).order_by(revisions.c.revision)
            ).all()
        return {
            "format": EXPORT_FORMAT,
            "id": a.id,
            "name": a.name,
            "owner": a.summary.owner,
            "created_at": a.summary.created_at,
            "updated_at": a.summary.updated_at,
            "revisions": [
                {
                    "revision": r.revision,
                    "name": r.name,
                    "config": json.loads(r.config_json),
                    "results": json.loads(r.results_json),
                    "note": r.note,
                    "saved_by": r.saved_by,
                    "created_at": r.created_at,
                }
                for r in revs
            ],
            "runs": [r.run.model_dump(mode="json") for r in a.runs],
            "telemetry": [{"kind": t["kind"], "payload": t["payload"]} for t in a.telemetry],
            "startup_logs": [
                {"name": lg["name"], "log": lg["log"].model_dump(mode="json"), "text": lg["text"]} for lg in a.logs
            ],
        }

    def export_text(self, analysis_id: str) -> str:
        """:meth:`export` as the file ``export`` writes and ``import`` reads back: compact JSON (indented, a
        telemetry file's samples take four times their size), never larger than the import's bound."""
        return json.dumps(self.export(analysis_id), separators=(",", ":"), allow_nan=False)

    def import_(self, data: Any, *, saved_by: str = "", owner: str | None = None) -> str:
        """Import an exported analysis as a new analysis (a new id; revisions, runs and telemetry kept).

        Every part is checked before anything is written (:func:`read_export`): a refused export changes nothing.
        """
        ex = read_export(data)
        saved_by = _check_line(saved_by, "saved by")
        t = now()
        aid = secrets.token_hex(6)
        revs, cfgs = ex["revisions"], [r["config"] for r in ex["revisions"]]
        with self._engine.begin() as c:
            c.execute(
                insert(analyses).values(
                    id=aid,
                    name=ex["name"],
                    model=cfgs[-1].model_label,
                    gpu=cfgs[-1].gpu,
                    owner=owner if owner is not None else ex["owner"],
                    saved_by=saved_by,
                    revision=len(revs),
                    created_at=ex["created_at"] or t,
                    updated_at=t,
                    deleted_at=None,
                )
            )
            for i, r in enumerate(revs, start=1):
                c.execute(
                    insert(revisions).values(
                        analysis_id=aid,
                        revision=i,
                        name=r["name"] or ex["name"],
                        config_json=r["config"].model_dump_json(),
                        results_json=json.dumps(r["results"], allow_nan=False),
                        note=r["note"],
                        saved_by=r["saved_by"],
                        created_at=r["created_at"] or t,
                    )
                )
            for run in ex["runs"]:
                c.execute(
                    insert(runs).values(
                        analysis_id=aid,
                        label=run.label[:200],
                        source=run.source,
                        run_json=run.model_dump_json(),
                        created_at=t,
                    )
                )
            for kind, payload in ex["telemetry"]:
                c.execute(
                    insert(telemetry).values(
                        analysis_id=aid,
                        kind=kind,
                        payload_json=json.dumps(payload, allow_nan=False, separators=(",", ":")),
                        created_at=t,
                    )
                )
            for lname, lg, text in ex["startup_logs"]:
                c.execute(
                    insert(startup_logs).values(
                        analysis_id=aid,
                        name=lname[:200],
                        engine=lg.engine,
                        payload_json=lg.model_dump_json(),
                        text=text[:MAX_STORED_LOG_CHARS],
                        created_at=t,
                    )
                )
        return aid


def _stored_log(r) -> dict[str, Any]:
    """A stored start-up log; numbers this version cannot read any more are dropped, not the analysis."""
    try:
        log = StartupLog.model_validate_json(r.payload_json)
    except ValidationError:
        data = {k: v for k, v in json.loads(r.payload_json).items() if k in StartupLog.model_fields}
        log = StartupLog.model_validate(data)
    return {"id": r.id, "name": r.name, "engine": r.engine, "created_at": r.created_at, "log": log, "text": r.text}


#: The keys an export has (``export``), at the top and in each revision; an import refuses any other.
_EXPORT_KEYS = frozenset(
    {"format", "id", "name", "owner", "created_at", "updated_at", "revisions", "runs", "telemetry", "startup_logs"}
)
_REVISION_KEYS = frozenset({"revision", "name", "config", "results", "note", "saved_by", "created_at"})
#: A stored time: ISO 8601 UTC as :func:`now` writes it.
_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?Z?")


def read_export(data: Any) -> dict[str, Any]:
    """An export checked part by part, as :meth:`Store.import_` writes it: ``name``, ``owner``, ``created_at``,
    ``revisions`` (each with its config validated), ``runs`` (validated) and ``telemetry`` as (kind, payload)
    pairs (each payload read as stored telemetry is). Raises :class:`StoreError` naming the export's field."""
    if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
        raise StoreError(f'not a RA-BIT analysis export (expected "format": "{EXPORT_FORMAT}")')
    extra = sorted(set(data) - _EXPORT_KEYS)
    if extra:
        raise StoreError(f"the export has a field this version does not know: {extra[0]!r}")
    out_revs = _export_revisions(data)
    name: str = _export_text(data, "name", "", _check_line_name) or out_revs[-1]["name"] or "imported analysis"
    out_runs = _export_runs(data)
    out_tel = _export_telemetry(data)
    out_logs = _export_logs(data)
    owner = data.get("owner")
    if owner is not None:
        owner = _export_text(data, "owner", "", lambda v: _check_line(v, "owner"))
    return {
        "name": _check_name(name),
        "owner": owner,
        "created_at": _export_time(data, ""),
        "revisions": out_revs,
        "runs": out_runs,
        "telemetry": out_tel,
        "startup_logs": out_logs,
    }


def _export_revisions(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The export's revisions, each with its config validated and its texts and time checked (at least one)."""
    revs = data.get("revisions")
    if not isinstance(revs, list) or not revs:
        raise StoreError("the export has no revisions")
    out_revs: list[dict[str, Any]] = []
    for i, r in enumerate(revs, 1):
        where = f"revisions[{i}]"
        if not isinstance(r, dict):
            raise StoreError(f"the export's {where} is not an object")
        extra = sorted(set(r) - _REVISION_KEYS)
        if extra:
            raise StoreError(f"the export's {where} has a field this version does not know: {extra[0]!r}")
        if not isinstance(r.get("config"), dict):
            raise StoreError(f"the export's {where}.config is not an object")
        try:
            cfg = load_config(json.dumps(r["config"], allow_nan=False))
        except (StoreError, ValueError) as exc:
            raise StoreError(
                f"the export's {where}.config cannot be read: {str(exc).removeprefix('saved config cannot be read: ')}"
            ) from None
        results = r.get("results") if r.get("results") is not None else {}
        if not isinstance(results, dict):
            raise StoreError(f"the export's {where}.results is not an object")
        out_revs.append(
            {
                "config": cfg,
                "results": results,
                "name": _export_text(r, "name", where, _check_line_name),
                "note": _export_text(r, "note", where, _check_note),
                "saved_by": _export_text(r, "saved_by", where, lambda v: _check_line(v, "saved by")),
                "created_at": _export_time(r, where),
            }
        )
    return out_revs


def _export_runs(data: dict[str, Any]) -> list[Run]:
    """The export's measured runs, each validated."""
    run_items = data.get("runs") if data.get("runs") is not None else []
    if not isinstance(run_items, list):
        raise StoreError("the export's runs are not a list")
    out_runs = []
    for i, r in enumerate(run_items, 1):
        try:
            out_runs.append(Run.model_validate(r))
        except ValidationError as exc:
            raise StoreError(f"the export's runs[{i}] cannot be read: {describe_validation_error(exc)}") from None
    return out_runs


def _export_telemetry(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The export's telemetry as (kind, payload) pairs, each payload read as stored telemetry is and its kind its
    payload's format."""
    tel_items = data.get("telemetry") if data.get("telemetry") is not None else []
    if not isinstance(tel_items, list):
        raise StoreError("the export's telemetry is not a list")
    out_tel = []
    for i, tel in enumerate(tel_items, 1):
        where = f"telemetry[{i}]"
        if (
            not isinstance(tel, dict)
            or not isinstance(tel.get("kind"), str)
            or not isinstance(tel.get("payload"), dict)
        ):
            raise StoreError(f"the export's {where} is not a telemetry record (a kind and a payload)")
        try:
            parsed = from_payload(tel["payload"])
        except TelemetryError as exc:
            raise StoreError(f"the export's {where}: {exc}") from None
        if tel["kind"] != parsed.fmt:
            raise StoreError(
                f"the export's {where}.kind {tel['kind'][:40]!r} is not its payload's format {parsed.fmt!r}"
            )
        out_tel.append((tel["kind"], tel["payload"]))
    return out_tel


def _export_logs(data: dict[str, Any]) -> list[tuple[str, StartupLog, str]]:
    """The export's start-up logs as (name, the numbers read, the text)."""
    log_items = data.get("startup_logs") if data.get("startup_logs") is not None else []
    if not isinstance(log_items, list):
        raise StoreError("the export's startup_logs are not a list")
    out_logs = []
    for i, lg in enumerate(log_items, 1):
        where = f"startup_logs[{i}]"
        if not isinstance(lg, dict) or not isinstance(lg.get("log"), dict):
            raise StoreError(f"the export's {where} is not a start-up log (a name, its numbers and its text)")
        try:
            parsed_log = StartupLog.model_validate(lg["log"])
        except ValidationError as exc:
            raise StoreError(f"the export's {where}.log cannot be read: {describe_validation_error(exc)}") from None
        text = lg.get("text") if lg.get("text") is not None else ""
        if not isinstance(text, str):
            raise StoreError(f"the export's {where}.text is not text")
        lname = _export_text(lg, "name", where, _check_line_name) or "start-up log"
        out_logs.append((lname, parsed_log, text))
    return out_logs


def _export_text(obj: dict[str, Any], key: str, where: str, check) -> str:
    """A text field of an export ("" when absent), checked by ``check``; StoreError naming it otherwise."""
    v = obj.get(key)
    if v is None:
        return ""
    label = f"{where}.{key}" if where else key
    if not isinstance(v, str):
        raise StoreError(f"the export's {label} is not text: {type(v).__name__.replace('dict', 'an object')}")
    try:
        return check(v) if v.strip() else ""
    except StoreError as exc:
        raise StoreError(f"the export's {label}: {exc}") from None


def _export_time(obj: dict[str, Any], where: str) -> str | None:
    v = obj.get("created_at")
    if v is None:
        return None
    if not isinstance(v, str) or not _TIME.fullmatch(v):
        label = f"{where}.created_at" if where else "created_at"
        raise StoreError(f"the export's {label} is not a time (2026-12-01T09:30:00Z): {str(v)[:40]!r}")
    return v


def _check_line_name(name: str) -> str:
    return _check_name(name)


def _check_line(text: str, what: str) -> str:
    """One line of text a person typed (who saved, an owner): no control characters, at most 200 characters."""
    why = text_problem(text or "", max_chars=MAX_NAME_CHARS)
    if why is not None:
        raise StoreError(f"{what}: {why}")
    return (text or "").strip()


def _check_note(note: str) -> str:
    """A note: text with lines, no other control characters, at most :data:`MAX_NOTE_CHARS` characters."""
    why = text_problem(note or "", max_chars=MAX_NOTE_CHARS, multiline=True)
    if why is not None:
        raise StoreError(f"note: {why}")
    return note or ""


def _check_room(c: Any, analysis_id: str, adding: int) -> None:
    """Refuse (before anything is written) what would make the analysis's export larger than
    :data:`core.base.payloads.MAX_ANALYSIS_BYTES`, the bound ``import`` reads back."""
    have = 0
    for table, cols in (
        (revisions, (revisions.c.config_json, revisions.c.results_json, revisions.c.note)),
        (runs, (runs.c.run_json,)),
        (telemetry, (telemetry.c.payload_json,)),
        (startup_logs, (startup_logs.c.payload_json, startup_logs.c.text)),
    ):
        total = sum(func.coalesce(func.length(col), 0) for col in cols)
        have += int(
            c.execute(select(func.coalesce(func.sum(total), 0)).where(table.c.analysis_id == analysis_id)).scalar_one()
        )
    if have + adding > MAX_ANALYSIS_BYTES:
        raise StoreError(
            f"the analysis would hold {(have + adding) / 1e6:,.1f} MB; the limit is {MAX_ANALYSIS_BYTES / 1e6:,.0f} MB "
            "so that its export can be imported again (attach less, or start a new analysis)"
        )


def _check_name(name: str) -> str:
    """An analysis's name: one line of text a person typed (no control characters), 1-200 characters."""
    if not isinstance(name, str):
        raise StoreError("the name is not text")
    name = name.strip()
    if not name:
        raise StoreError("an analysis needs a name")
    why = text_problem(name, max_chars=MAX_NAME_CHARS)
    if why is not None:
        raise StoreError(f"the name: {why}")
    return name
