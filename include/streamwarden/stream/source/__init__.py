"""Kafka for Spark without the JVM connector: a PySpark Python Data Source streaming reader."""
