"""Provider list APIs for reconciliation; keys are those of ``hookd.providers``."""
