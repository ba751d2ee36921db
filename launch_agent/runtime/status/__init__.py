"""The status page: what the agent is doing, for admins (docs/operations.md, "Status page").

`activity` records recent events (bounded); `snapshot` turns plain data into the JSON view;
`page` renders that view as HTML. `runtime/status_source.py` reads the runtime objects into
the plain data. This package is pure by contract (pyproject.toml, import-linter): no I/O.
"""
