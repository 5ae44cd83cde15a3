"""The review surfaces: the dashboard at /dashboard and what it shares with the
explanation API and ``tollgate logs`` (who may see what, reading the request log)."""
