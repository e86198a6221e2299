"""The run plan: one typed description of a run, from the trigger form to every platform request."""
