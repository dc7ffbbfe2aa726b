"""Measuring a training run: the matmul peak (`peak.py`), FLOPs of the work executed and MFU (`flops.py`),
peak memory and where it goes (`memory.py`), step wall times (`timing.py`).

Below the trainer: the trainer's bf16 hint, the main job's MFU line and the benchmark all use these, and
nothing here imports the benchmark, the main job or the CLI."""
