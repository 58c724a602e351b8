"""Composition: the Starlette app and the arq worker, built from settings."""
