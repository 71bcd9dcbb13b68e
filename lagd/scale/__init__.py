"""Workers that share the offsets topic through Kafka's group protocol (issue 16)."""
