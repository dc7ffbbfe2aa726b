"""Small helpers shared across turbotrain: optional-import guards and one-time warnings."""
