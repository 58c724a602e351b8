"""Receiving: the raw ASGI receiver, its head guard and the group committer."""
