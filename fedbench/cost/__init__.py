"""Layer 3, the pure cost model: a cell's work, time and memory before it runs (no files but the
throughput table).  May import layers 0-3, never an algorithm module."""
