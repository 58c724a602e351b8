"""hookd receiver, CLI and processing."""
