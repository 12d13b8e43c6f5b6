"""The control channel to the collection points: typed commands on a Kafka control topic."""
