"""The process's environment, set up once: litellm imported offline (litellm_env), the
Hugging Face hub's reachability (hub_reach), a SQLite key-value cache shared by
processes (sqlite_cache).
"""
