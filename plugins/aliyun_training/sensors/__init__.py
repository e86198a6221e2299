"""Sensors that wait, deferred, for a condition in the cloud."""
