"""Queues (the Q.* commands): SQS semantics on a stream and its state log."""
