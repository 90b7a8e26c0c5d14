"""evalkit: one command that tells whether a change broke model accuracy in any serving configuration."""

__version__ = "0.1.0"
