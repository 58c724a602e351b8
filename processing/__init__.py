"""Processing: claim stored events, run handlers, retry or bury them."""
