"""lagd: a Kafka consumer-lag evaluator daemon (Burrow's window rules, durable, observable)."""

__version__ = "0.1.0"
