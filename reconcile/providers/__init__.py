"""Provider list APIs for reconciliation; keys are those of ``ingest.providers``."""
