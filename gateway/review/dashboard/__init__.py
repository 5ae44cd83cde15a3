"""The review surfaces of issue 7: the dashboard at /dashboard and what it shares with the
explanation API and ``tollgate logs`` (who may see what, reading the request log)."""
