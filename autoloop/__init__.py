"""autoloop: ratchet loops on a git repository with the generator and the verifier kept apart."""

__version__ = "0.1.0"
