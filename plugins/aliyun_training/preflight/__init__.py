"""Checks that run before anything is copied or submitted, each finding with a concrete fix."""
