"""``lambdalake query`` through the deployment's HTTP API when ``lambdalake up`` started it: its engine
is warm, where a new process would build one and copy every table first (serving_layer.engine)."""

from __future__ import annotations

import requests
from pydantic import BaseModel, TypeAdapter

from infra import processes
from infra.deployment import Deployment
from infra.services import SERVING
from serving_layer.access import token


class Rows(BaseModel):
    """A query's answer as the API sends it."""

    columns: list[str]
    rows: list[list]


#: Rows as JSON values (built once: building one costs more than a point query's rows).
_ROWS = TypeAdapter(list[list])


def sent(columns: list[str], rows: list[tuple]) -> Rows:
    """An engine's answer with its values as the API sends them (times in ISO 8601, numbers as JSON's)."""
    return Rows(columns=columns, rows=_ROWS.dump_python([list(row) for row in rows], mode="json"))


def encoded(columns: list[str], rows: list[tuple]) -> bytes:
    """:func:`sent`'s answer as the API's JSON, encoded in one step."""
    return Rows.model_construct(columns=columns, rows=[list(row) for row in rows]).model_dump_json().encode()


def query(settings: Deployment, sql: str) -> Rows | None:
    """``sql`` answered by this deployment's running API, or None if it is not running or does not
    answer; a query it refuses raises ``QueryError`` with the API's one line."""
    if processes.running_pid(settings, SERVING) is None:
        return None
    given = token(settings, settings.serve_host)
    try:
        response = requests.post(
            settings.serve_url + "query",
            json={"sql": sql},
            headers={"Authorization": f"Bearer {given}"} if given else {},
            timeout=settings.query_timeout_seconds + 10,
        )
    except requests.RequestException:
        return None
    if response.status_code == 400:
        from serving_layer.sandbox import QueryError  # (which imports DuckDB: only when needed)

        raise QueryError(response.json()["detail"])
    return Rows.model_validate_json(response.content) if response.ok else None
