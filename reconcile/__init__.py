"""hookd reconciliation poller (see the reconciliation issue)."""
