"""Kubernetes objects this package creates: their names and labels, and the bare pods it runs on ACK."""
