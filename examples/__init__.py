"""Example handlers and configuration for the Quickstart (``examples/hookd.toml``).

A regular package, so that it wins over any installed package of the same name
(one provider SDK ships a top-level ``examples``).
"""
