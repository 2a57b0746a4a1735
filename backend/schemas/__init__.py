"""Request and response bodies of the REST API, split by role: `*Create`/`*Update` bodies,
`*Out` responses, and query filters. Routers never return ORM objects directly."""
