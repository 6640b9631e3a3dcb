"""tests/slurm: the Slurm example (examples/slurm/fully-async-grpo.sbatch) under a real Slurm, and its srun lines."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
