"""POST /v1/completions (legacy text completions): its handler and its stream."""
