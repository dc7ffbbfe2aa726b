"""What turbotrain knows of the libraries that build on Transformers' Trainer, one module per library
(`trl.py`), so that knowledge has one home and the trainer and the passes ask it."""
