"""Saved analyses: create, save a new revision (optimistic concurrency), list and search, rename,
soft delete and restore, attach runs and telemetry, export and import.

Nothing is overwritten: every save adds a row to ``revisions``; the analysis row's ``revision`` is the
token a writer must present (``expected_revision``). The update that bumps it and the insert of the new
revision are one transaction, so a writer killed in between leaves the previous revision current and
readable, and of two writers holding the same token exactly one wins; the other gets :class:`Conflict`
with the current revision and may save again on top of it (a new revision, nothing lost).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, func, insert, or_, select, update

from core.config import RabitConfig, describe_validation_error
from core.operations import Run
from store import db
from store.schema import analyses, revisions, runs, telemetry

#: ``export`` writes this format tag; ``import_`` checks it.
EXPORT_FORMAT = "rabit-analysis/1"


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
        with self._engine.begin() as c:
            if c.execute(select(analyses.c.id).where(analyses.c.id == analysis_id)).first() is None:
                raise NotFound(f"no analysis with id {analysis_id!r}")
            res = c.execute(
                insert(telemetry).values(
                    analysis_id=analysis_id, kind=kind, payload_json=json.dumps(payload), created_at=now()
                )
            )
            return _new_id(res)

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
        if s:
            like = f"%{s}%"
            q = q.where(
                or_(
                    func.lower(analyses.c.name).like(like),
                    func.lower(analyses.c.model).like(like),
                    func.lower(analyses.c.gpu).like(like),
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
        }

    def import_(self, data: Any, *, saved_by: str = "", owner: str | None = None) -> str:
        """Import an exported analysis as a new analysis (a new id; revisions, runs and telemetry kept)."""
        if not isinstance(data, dict) or data.get("format") != EXPORT_FORMAT:
            raise StoreError(f'not a RA-BIT analysis export (expected "format": "{EXPORT_FORMAT}")')
        revs = data.get("revisions")
        if not isinstance(revs, list) or not revs:
            raise StoreError("the export has no revisions")
        try:
            cfgs = [RabitConfig.model_validate(r["config"]) for r in revs]
            imported_runs = [Run.model_validate(r) for r in data.get("runs", [])]
        except (ValidationError, KeyError, TypeError) as exc:
            msg = describe_validation_error(exc) if isinstance(exc, ValidationError) else f"missing {exc}"
            raise StoreError(f"the export cannot be read: {msg}") from None
        name = _check_name(str(data.get("name") or revs[-1].get("name") or "imported analysis"))
        t = now()
        aid = secrets.token_hex(6)
        with self._engine.begin() as c:
            c.execute(
                insert(analyses).values(
                    id=aid,
                    name=name,
                    model=cfgs[-1].model_label,
                    gpu=cfgs[-1].gpu,
                    owner=owner if owner is not None else data.get("owner"),
                    saved_by=saved_by,
                    revision=len(revs),
                    created_at=str(data.get("created_at") or t),
                    updated_at=t,
                    deleted_at=None,
                )
            )
            for i, (r, cfg) in enumerate(zip(revs, cfgs), start=1):
                c.execute(
                    insert(revisions).values(
                        analysis_id=aid,
                        revision=i,
                        name=str(r.get("name") or name),
                        config_json=cfg.model_dump_json(),
                        results_json=json.dumps(r.get("results") or {}),
                        note=str(r.get("note") or ""),
                        saved_by=str(r.get("saved_by") or ""),
                        created_at=str(r.get("created_at") or t),
                    )
                )
            for run in imported_runs:
                c.execute(
                    insert(runs).values(
                        analysis_id=aid,
                        label=run.label[:200],
                        source=run.source,
                        run_json=run.model_dump_json(),
                        created_at=t,
                    )
                )
            for tel in data.get("telemetry", []):
                c.execute(
                    insert(telemetry).values(
                        analysis_id=aid,
                        kind=str(tel.get("kind", "")),
                        payload_json=json.dumps(tel.get("payload")),
                        created_at=t,
                    )
                )
        return aid


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise StoreError("an analysis needs a name")
    if len(name) > 200:
        raise StoreError("the name is longer than 200 characters")
    return name
