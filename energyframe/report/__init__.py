"""What people read: a run as Markdown, the power-trace PNG, the self-contained HTML report."""
