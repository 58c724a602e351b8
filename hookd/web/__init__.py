"""The HTTP surface besides the receiver: API, admin UI, health, auth."""
