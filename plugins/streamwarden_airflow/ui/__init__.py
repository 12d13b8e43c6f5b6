"""The Streamwarden page in the Airflow UI: a FastAPI app serving :mod:`streamwarden.dashboard`."""
