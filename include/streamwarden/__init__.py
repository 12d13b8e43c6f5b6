"""Streamwarden: Kafka -> Spark Structured Streaming -> exactly-once Delta Lake tables, kept alive by Airflow.

The core library. It never imports Airflow: DAGs, operators and Spark jobs only wire what lives here.
"""

__version__ = "0.1.0"
