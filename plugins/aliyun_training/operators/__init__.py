"""Operators for each pipeline stage: preflight, staging, image, training, artifacts."""
