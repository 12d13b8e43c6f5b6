"""The warden: judges the stream's health, decides, restarts with backoff, stops it, and alerts a person.

Imports no pyspark and no Airflow: the Airflow plugins adapt these functions to hooks, operators and sensors.
"""
