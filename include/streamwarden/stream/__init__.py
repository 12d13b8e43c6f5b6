"""The Spark job: Kafka source, session rebuild, exactly-once sink, and the runner that ties them together.

Runs inside spark-submit; imports no Airflow. ``source/`` reads Kafka, ``sessions/`` rebuilds sessions in
keyed state, ``sink/`` commits each micro-batch once; ``runner`` holds the lease and exits with a class.
"""
