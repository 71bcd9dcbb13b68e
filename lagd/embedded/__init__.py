"""Real services run locally for the demo, the tests and the benchmarks: PostgreSQL,
Mosquitto and Tansu (services), Apache Kafka (kafka; `python -m lagd.embedded.kafka fetch`).
"""
