"""Built-in power sources."""
