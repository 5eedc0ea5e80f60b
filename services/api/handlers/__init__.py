"""The API's request handlers, one module per resource: ``submit``, ``jobs``, ``logs``,
``events``, ``artifacts``, ``accounting``, ``prices``, ``fleet``, ``secrets``, ``webhooks``,
``console``. ``services.api.routes`` maps them to routes and ``services.api.app`` composes
the application."""
