"""Prefect 3 flows that run evalcore on a Dask cluster (thin: they call the engine).

Importing this package sets two Prefect defaults, before Prefect itself is imported by
the modules below (it reads its settings once, at import); a value the user set wins:

* ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=300``: ``evalcore run`` and the demo
  run on Prefect's ephemeral server, a subprocess that must answer within this many
  seconds; Prefect's 20 is not enough on a busy machine or for a first start that
  creates its database;
* ``PREFECT_SERVER_ANALYTICS_ENABLED=false``: no network is needed, and the server's
  telemetry heartbeat collides with the flow run in SQLite at startup ("database is
  locked", with a 130-line traceback).
"""

import os

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "300")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
