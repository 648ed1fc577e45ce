"""The maths of a run, free of plugins and of I/O: clocks, spreads, sample series, window energy, alignment, power shapes and fusion."""
