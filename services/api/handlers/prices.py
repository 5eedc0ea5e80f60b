"""Prices: every version of the catalog on the ledger with the price book's verdict, and the
rows in force at a moment.
"""

from __future__ import annotations

from datetime import UTC

from aiohttp import web
from pydantic import ValidationError

from projections.prices import PriceBook
from schemas.events import PriceCatalogPublished
from services.api import models as m
from services.api.deps import POOL, problem_response, query_args, query_problems
from services.clock import utcnow
from services.sink.writer import load_book


async def list_prices(request: web.Request) -> web.Response:
    """GET /v1/prices: every version of the price catalog on the ledger, and the price
    book's verdict on it (the fold of :class:`projections.prices.PriceBook`)."""
    stored = await request.app[POOL].fetch("SELECT payload FROM price_catalogs ORDER BY seq")
    events = [PriceCatalogPublished.model_validate_json(r["payload"]) for r in stored]
    book = PriceBook(events)
    refused = {e.event_id: problems for e, problems in book.refused}
    versions = [
        {
            "version": event.version,
            "currency": event.currency,
            "published_at": event.occurred_at.isoformat(),
            "source": event.source,
            "accepted": event.event_id not in refused,
            "problems": [{"field": f, "problem": p} for f, p in refused.get(event.event_id, [])],
            "entries": [e.model_dump(mode="json") for e in event.entries],
        }
        for event in events
    ]
    body = {"currency": book.currency, "latest_version": book.version, "versions": versions}
    return web.json_response(body)


async def prices_in_force(request: web.Request) -> web.Response:
    """GET /v1/prices/in-force?at=TIME: the row pricing each key at that moment (now)."""
    try:
        query = m.PricesQuery.model_validate(query_args(request))
    except ValidationError as exc:
        return problem_response(422, query_problems(exc, 5000), "invalid_query")
    at = (query.at or utcnow()).astimezone(UTC)
    book = await load_book(request.app[POOL])
    rows = [
        {
            "provider": provider,
            "gpu_model": gpu_model,
            "region": region,
            "per_gpu_hour": price.per_gpu_hour,
            "effective_from": price.effective_from.isoformat(),
            "version": price.version,
        }
        for (provider, gpu_model, region), price in book.in_force(at)
    ]
    return web.json_response({"at": at.isoformat(), "currency": book.currency, "prices": rows})
