"""What the job writes and the warden reads: the checkpoint lease, the heartbeat, the checkpoint, failures.

Plain files with no pyspark: both sides of the process boundary read them.
"""
