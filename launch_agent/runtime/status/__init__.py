"""The status page: what the agent is doing, for admins (docs/operations.md, "Status page").

`activity` records recent events (bounded); `snapshot` turns plain data into the JSON view
(pure); `page` renders that view as HTML (pure); `source` reads the runtime objects.
"""
