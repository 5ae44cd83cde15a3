"""Which router expert a model string is: the identity table (``table``) read from
``model_identity.yaml`` (exact names and aliases, never a fuzzy guess)."""
