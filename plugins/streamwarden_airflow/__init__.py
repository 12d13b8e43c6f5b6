"""Airflow side of Streamwarden, laid out like a provider package: hooks, sensors, operators.

Everything here only adapts :mod:`streamwarden` (which never imports Airflow) to Airflow.
"""
