"""The running agent: supervisor, poller, dispatcher, informers, reporter, health server."""
