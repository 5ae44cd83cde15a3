"""The admin write API: tenants, keys and budgets behind the admin key (`api.build_router`)."""
