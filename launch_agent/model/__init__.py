"""Plain data shared by every layer: configuration, run queue items, queue specs, run states.

Pure: no I/O, no asyncio. Everything here is tested with tables.
"""
