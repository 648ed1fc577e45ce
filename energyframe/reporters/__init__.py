"""Built-in reporters."""
