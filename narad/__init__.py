"""Narad: a message queue with durable logs that speaks the Redis protocol."""

__version__ = "0.1.0"
