"""The admission engine as it was before the lazy tournament (commit 174428f), kept verbatim
except for its imports and one rule change (R8 never makes its preemptor's leaf borrow more
than before the plan, in `preemption.py`: the fix for the admission cycle, made to the rules,
this reference and the engine together), as a slow, independent reference for the
differential tests.

Only its exhaustive mode is used: every leaf is re-examined and every preemption is planned
in full, searching every tied subtree, at each iteration. It has its own copy of the
ledger too (no caches); it shares only the run model and the tree with the production engine.
Do not optimise it: its value is that it stays simple and stays put.
"""
