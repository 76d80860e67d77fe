"""interlock."""
