"""The HTTP API (aiohttp): submit, query, follow and cancel jobs; composition root ``build_app``."""
