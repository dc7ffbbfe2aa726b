"""The names every layer shares about a batch: the ignored label value and the keys turbotrain adds.

A leaf module (it imports nothing of turbotrain's), so that the packer, the model hooks, the trainer and
the integrations can all name these keys without importing one another.

* `IGNORE_INDEX` (-100): the label Transformers' losses skip (prompt tokens, padding, unmasked positions).
* The keys padding-free packing adds to a packed batch (passes/packing.py), removed by the model-side hook
  before the model runs:
  `SEQUENCE_STARTS` [B]: each sequence's first token as an index into the flattened [R * C] rows;
  `PADDED_LABELS` [B, L]: the padded labels, on which Trainer counts `num_items_in_batch` as stock would;
  `REAL_TOKENS` []: the number of real tokens, for trainers that count tokens from the mask (TRL);
  `SEGMENTS` [R, C]: which sequence each token belongs to (a row's tail its own segment).
"""

IGNORE_INDEX = -100

SEQUENCE_STARTS = "turbotrain_sequence_starts"
PADDED_LABELS = "turbotrain_padded_labels"
REAL_TOKENS = "turbotrain_real_tokens"
SEGMENTS = "turbotrain_segments"
PACKED_SEQUENCES = "turbotrain_packed_sequences"  # passes/packed_sequences.py: what the packed attention reads
PRIVATE_KEYS = (SEQUENCE_STARTS, PADDED_LABELS, REAL_TOKENS, SEGMENTS, PACKED_SEQUENCES)
