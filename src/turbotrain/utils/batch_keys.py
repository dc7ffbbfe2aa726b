"""The names every layer shares about a batch: the ignored label value and every private key turbotrain adds.

A leaf module (it imports nothing of turbotrain's), so that the passes, their model hooks, the trainer and
the integrations can all name these keys without importing one another. Each pass declares the keys its
collator step adds (`PassSpec.batch_keys`, passes/registry.py) and its model hook takes them off again.

* `IGNORE_INDEX` (-100): the label Transformers' losses skip (prompt tokens, padding, unmasked positions).
* `PACKING_KEYS`, added by padding-free's packer (passes/padding_free/packing.py), taken off by its model hook:
  `SEQUENCE_STARTS` [B]: each sequence's first token as an index into the flattened [R * C] rows;
  `PADDED_LABELS` [B, L]: the padded labels, on which Trainer counts `num_items_in_batch` as stock would;
  `PADDED_MASK` [B, L]: the padded batch's attention mask, on which Trainer counts `num_input_tokens_seen` as
  stock would (padded tokens for "all", real ones for "non_padding"), as do trainers that count tokens from the
  mask (TRL's SFT: its sum is the real tokens);
  `SEGMENTS` [R, C]: which sequence each token belongs to (a row's tail its own segment);
  `PACKED_SEQUENCES`: the real tokens by sequence length (passes/padding_free/packed_sequences.py), what
  packed attention reads.
* `HOST_ROWS_KEYS`, added by label sparsity's host-rows step (passes/label_sparsity/host_rows.py), taken off
  by its model hook:
  `LABEL_ROWS` [K] int64: the flattened [B*T] positions whose target is not -100;
  `LABEL_TARGETS` [K]: those targets;
  `LABEL_GRID` [B, T, 0]: an empty tensor whose shape records the labels' shape.
* `ATTENTION_SEQUENCES`: not a batch key but the keyword padding-free's hook hands the packed attention function
  inside one model call (passes/padding_free/packed_attention.py), which takes it off before the stock attention runs.
"""

IGNORE_INDEX = -100

SEQUENCE_STARTS = "turbotrain_sequence_starts"
PADDED_LABELS = "turbotrain_padded_labels"
PADDED_MASK = "turbotrain_padded_mask"
SEGMENTS = "turbotrain_segments"
PACKED_SEQUENCES = "turbotrain_packed_sequences"
PACKING_KEYS = (SEQUENCE_STARTS, PADDED_LABELS, PADDED_MASK, SEGMENTS, PACKED_SEQUENCES)

LABEL_ROWS = "turbotrain_label_rows"
LABEL_TARGETS = "turbotrain_label_targets"
LABEL_GRID = "turbotrain_label_grid"
HOST_ROWS_KEYS = (LABEL_ROWS, LABEL_TARGETS, LABEL_GRID)

ATTENTION_SEQUENCES = "turbotrain_sequences"
