"""Dataset converters. ``python -m vlgrpo data geo3k SRC OUT``: Geometry3K -> verl RL parquet (offline)."""
