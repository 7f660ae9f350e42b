"""The options of every Airflow process's connection to its SQLite metadata database.

SQLite lets one writer at a time; Python's default is to wait 5 s for the lock and then fail. On 2 busy
cores the scheduler can hold it that long while a backfill's tasks start, and the API server then
answered a pause with HTTP 500 ("database is locked"). A writer waits up to a minute instead.
"""

#: ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS`` names this dict (Airflow imports it).
CONNECT_ARGS = {"timeout": 60}
