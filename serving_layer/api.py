"""The HTTP API and dashboard for analysts (FastAPI; `lambdalake serve`, also started by `lambdalake up`).

- ``GET /views``: the declared views (serving_layer.catalog);
- ``GET /views/{name}``: a view's merged rows, with a time range, key filters and pagination, each row
  with its ``source`` (batch or speed) and ``is_final``;
- ``POST /query``: one sandboxed SELECT (serving_layer.sandbox), as ``lambdalake query`` runs it;
- ``GET /health``: the speed layer, the engines, dead letters, and per view its final and provisional days;
- ``GET /``: the dashboard (serving_layer/dashboard), with plotly.js from the plotly package.

The OpenAPI description is at ``/openapi.json``. Bound to a loopback address the API is open; bound to
any other it requires ``Authorization: Bearer <token>`` (setting ``serve_token``, else a token generated
once and kept in the deployment's home, readable by its owner only), which is never printed or logged.
The token guards every route that reads the deployment's data (its views, their days, its health, its
queries); what is the same in every deployment stays open, as in the source it comes from: the
OpenAPI description (routes and parameters, no view's name), the dashboard's page and scripts.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from infra import credentials
from infra.deployment import Deployment
from infra.processes import Say
from serving_layer import catalog, client, engine
from serving_layer.access import token
from serving_layer.sandbox import QueryError

DASHBOARD = Path(__file__).parent / "dashboard"
#: Query parameters of ``GET /views/{name}`` that are not key filters.
PAGING = frozenset({"start", "end", "limit", "offset"})


class Sql(BaseModel):
    sql: str


class Page(BaseModel):
    view: str
    rows: list[dict]
    #: The ``offset`` of the next page, or null on the last one.
    next_offset: int | None


@lru_cache(maxsize=1)
def _plotly() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _utc(moment: datetime | None) -> datetime | None:
    return moment if moment is None or moment.tzinfo else moment.replace(tzinfo=UTC)


async def deployment(request: Request) -> Deployment:
    """The deployment the app serves (a dependency of every route that reads its data). The
    dependencies are coroutines, as they never block: FastAPI runs a plain function's on a thread of
    its pool, two hops more for every request."""
    return request.app.state.settings


async def authorized(request: Request) -> None:
    """Refuse a request without the app's token, when it requires one."""
    required, given = request.app.state.token, request.headers.get("authorization", "")
    if required and not secrets.compare_digest(given.encode(), f"Bearer {required}".encode()):
        raise HTTPException(401, "missing or wrong token: send the header Authorization: Bearer <token>")


Served = Annotated[Deployment, Depends(deployment)]
#: The routes of the deployment's data: each needs the token when the app requires one.
data = APIRouter(dependencies=[Depends(authorized)])
#: What is the same in every deployment: the dashboard's page and scripts.
pages = APIRouter(include_in_schema=False)


def _run(settings: Deployment, sql: str, params: dict | None = None) -> tuple[list[str], list[tuple]]:
    """``sql`` through the serving engine; an analyst's mistake is a 400 in one line."""
    try:
        return engine.query(settings, sql, params)
    except (QueryError, LookupError) as exc:
        raise HTTPException(400, str(exc)) from None


@pages.get("/")
def dashboard() -> FileResponse:
    return FileResponse(DASHBOARD / "index.html")


@pages.get("/plotly.min.js")
def plotly() -> Response:
    return Response(_plotly(), media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


@data.get("/views", summary="The declared views, with their final and provisional days")
def views(settings: Served) -> list[catalog.ViewInfo]:
    return catalog.views(settings)


@data.get(
    "/views/{name}",
    response_model=Page,
    summary="A view's merged rows (key filters as query parameters, e.g. ?page=/home)",
)
def view_rows(
    settings: Served,
    request: Request,
    name: str,
    start: datetime | None = None,
    end: datetime | None = None,
    limit: int = Query(1000, ge=1, description="at most query_max_rows"),
    offset: int = Query(0, ge=0),
) -> Page:
    view = settings.views.get(name)
    if view is None:
        raise HTTPException(404, f"no view named {name}")
    if limit > settings.query_max_rows:
        raise HTTPException(422, f"limit {limit}: at most {settings.query_max_rows} (setting query_max_rows)")
    filters = {k: v for k, v in request.query_params.items() if k not in PAGING}
    unknown = sorted(set(filters) - set(view.keys))
    if unknown:
        raise HTTPException(
            400, f"{', '.join(unknown)}: not a key of {name}; its keys: {', '.join(view.keys) or 'none'}"
        )
    conditions = ["TRUE"]
    params: dict[str, datetime | str | None] = {}
    for label, moment, op in (("start", start, ">="), ("end", end, "<")):
        if moment is not None:
            conditions.append(f"window_start {op} ${label}")
            params[label] = _utc(moment)
    for i, (key, value) in enumerate(filters.items()):
        conditions.append(f'CAST("{key}" AS VARCHAR) = $k{i}')
        params[f"k{i}"] = value
    if name not in engine.with_data(settings):
        return Page(view=name, rows=[], next_offset=None)
    order = ", ".join(f'"{c}"' for c in ("window_start", *view.keys))
    columns, found = _run(
        settings,
        f'SELECT * FROM "{name}" WHERE {" AND ".join(conditions)} ORDER BY {order} LIMIT {limit + 1} OFFSET {offset}',
        params,
    )
    more = len(found) > limit
    return Page(
        view=name,
        rows=[dict(zip(columns, row, strict=True)) for row in found[:limit]],
        next_offset=offset + limit if more else None,
    )


@data.post("/query", response_model=client.Rows, summary="One sandboxed SELECT over the views")
def query(settings: Served, body: Sql) -> Response:
    """Answered as JSON here: an answer returned as a model, FastAPI would check it against the model on
    its thread pool, a second hop for every query."""
    return Response(client.encoded(*_run(settings, body.sql)), media_type="application/json")


@data.get("/health", summary="Speed layer, engines, dead letters, and each view's days")
def health(settings: Served) -> catalog.Health:
    return catalog.health(settings)


def failed(request: Request, exc: Exception) -> JSONResponse:
    """A query of the server's own that failed (a broken table read for /health): said in one line."""
    return JSONResponse({"detail": str(exc)}, status_code=500)


def create(settings: Deployment, required_token: str | None = None) -> FastAPI:
    """The API and dashboard over ``settings``' deployment; requests need ``required_token`` if given."""
    app = FastAPI(title="lambdalake", description=__doc__, docs_url=None, redoc_url=None)
    app.state.settings, app.state.token = settings, required_token
    app.mount("/static", StaticFiles(directory=DASHBOARD), name="static")
    app.add_exception_handler(QueryError, failed)
    app.include_router(pages)
    app.include_router(data)
    return app


def serve(settings: Deployment, host: str, port: int, say: Say = print) -> None:
    """Serve the API and dashboard on ``host:port`` until interrupted. Arrow allocates from the system's
    malloc here, not its default mimalloc, which keeps per thread what each read of a table's Parquet
    files freed (the engine gives malloc's back after a whole copy): a refresh over a 10-minute soak's
    tables ends 85 MB smaller. The event loop is asyncio's own, not uvloop (uvicorn's choice when it is
    installed): uvloop writes each response to its socket holding Python's lock, which the threads
    answering other queries then wait for. 8 clients querying back to back: p99 37-42 ms on asyncio's
    loop, 47-51 ms on uvloop's."""
    import pyarrow
    import uvicorn

    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    engine.watch(settings)

    required = token(settings, host)
    say(
        f"serving http://{host}:{port}/"
        + (
            f" (requests need the token in {credentials.where(settings, 'serve_token', 'serve-token')})"
            if required
            else ""
        )
    )
    uvicorn.run(create(settings, required), host=host, port=port, log_level="warning", loop="asyncio")
