"""The API's request handlers, one module per resource; ``services.api.routes`` maps them to
routes and ``services.api.app`` composes the application."""
