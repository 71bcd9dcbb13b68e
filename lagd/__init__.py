"""lagd: a Kafka consumer-lag evaluator daemon (window rules judged on time, Burrow's API, durable, observable)."""

__version__ = "0.1.0"
