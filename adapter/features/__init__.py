"""DAP glue of ptdebug's features: what turns an engine (watchpoints, recorder, reverse) into
requests, events and capabilities of a session.

Layer: features, above the engines and beside session.py. A module here knows DAP and the
Session's hooks (`backend`, `pid`, `client`, `announce_capabilities`, and `routes`, where it
plugs its steps into the rows of the route table, adapter/routes.py) and one engine; never
another feature.
"""
