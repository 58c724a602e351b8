"""Metrics read at scrape time and the worker's own metrics server."""
