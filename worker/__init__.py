"""Harness → AG-UI stream processor: a Kafka-free conversion core and an exactly-once consumer-group worker."""
