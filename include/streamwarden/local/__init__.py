"""The local platform of ``streamwarden up``: a Tansu broker on loopback, the demo producer, Airflow standalone.

Development only; imports no pyspark.
"""
