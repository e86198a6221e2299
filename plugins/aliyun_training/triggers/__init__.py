"""Deferrable waits that run in the triggerer."""
