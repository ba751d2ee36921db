"""The admission engine as it was before the lazy tournament (commit 174428f), kept verbatim
except for its imports, as a slow, independent reference for the differential tests.

Only its exhaustive mode is used: every leaf is re-examined and every preemption is planned
in full, searching every tied subtree, at each iteration. It shares the ledger, the run
model and the tree with the production engine, whose rules it implements the simple way.
Do not optimise it: its value is that it stays simple and stays put.
"""
