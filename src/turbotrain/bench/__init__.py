"""Side-by-side measurement: stock Trainer, Trainer(torch_compile=True) and TurboTrainer in one process,
interleaved (A B C A B C), medians and ratios. A script's job, never a timed test."""
