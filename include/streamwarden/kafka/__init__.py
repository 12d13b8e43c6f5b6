"""Broker look-ups shared by the job, the warden and the local platform: topics, partitions, watermarks."""
