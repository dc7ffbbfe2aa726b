"""Synthetic batches: the self-checks of the passes and the exporter's sample inputs come from here.

* `synthetic_batch(model, ...)`: a small deterministic batch (private RNG, training RNG untouched) of
  uneven, right-padded rows with labels that fit the task: token ids for language models, class ids
  below `num_labels` for token and sequence classification.
* `speech_features(model, ...)`: a speech model (`main_input_name` is `input_features`: Whisper,
  Speech2Text) gets random log-mel features in the layout its encoder requires instead of `input_ids`.
"""

from __future__ import annotations

import torch
from torch import nn

from turbotrain.modeling.parts import num_classes, pad_token_id, vocab_size
from turbotrain.modeling.tasks import SEQUENCE_CLASSIFICATION, TOKEN_CLASSIFICATION, task_of, unwrap
from turbotrain.utils.batch_keys import IGNORE_INDEX


def synthetic_batch(
    model: nn.Module, lengths: list[int], *, seed: int, ignore_every: int = 0, first_id: int = 4
) -> dict[str, torch.Tensor]:
    """A right-padded batch of `len(lengths)` rows with labels fitting the model's task, on its device.

    input_ids [B, T] in [first_id, vocab) (special ids below first_id stay out), pad where the
    attention mask is 0; labels: [B] classes for sequence classification, else [B, T] with -100 on
    padding and on every `ignore_every`-th position (0: none); token ids for language models, class
    ids for token classification. Drawn from a private generator seeded with `seed`.
    """
    generator = torch.Generator().manual_seed(seed)
    rows, length = len(lengths), max(lengths)
    vocab = vocab_size(model) or num_classes(model)  # a speech encoder-decoder's labels are its decoder's ids
    input_ids = torch.randint(first_id, max(vocab, first_id + 1), (rows, length), generator=generator)
    attention_mask = (torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]).long()
    input_ids[attention_mask == 0] = pad_token_id(model)
    task = task_of(model)
    if task == SEQUENCE_CLASSIFICATION:
        labels = torch.randint(0, num_classes(model), (rows,), generator=generator)
    else:
        labels = (
            input_ids.clone()
            if task != TOKEN_CLASSIFICATION
            else torch.randint(0, num_classes(model), (rows, length), generator=generator)
        )
        labels[attention_mask == 0] = IGNORE_INDEX
        if ignore_every:
            labels[:, ::ignore_every] = IGNORE_INDEX
    device = next(model.parameters()).device
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    if getattr(unwrap(model), "main_input_name", "input_ids") == "input_features":
        batch = {"input_features": speech_features(model, rows, generator), "labels": labels}
    return {name: tensor.to(device) for name, tensor in batch.items()}


def speech_features(model: nn.Module, rows: int, generator: torch.Generator) -> torch.Tensor:
    """Random log-mel features: [B, mel bins, 2 x max_source_positions] for a Whisper-style encoder (two
    convolution frames per encoder position, the length it requires), else [B, 32 frames, features per frame]
    (Speech2Text's `input_feat_per_channel` x `input_channels`, Wav2Vec2-BERT's and SeamlessM4T's
    `feature_projection_input_dim`); a layout this cannot tell raises ValueError (the self-check refuses)."""
    config = unwrap(model).config
    dtype = next(model.parameters()).dtype
    mel_bins, positions = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if isinstance(mel_bins, int) and isinstance(positions, int):
        return torch.randn(rows, mel_bins, 2 * positions, generator=generator).to(dtype)
    per_channel = getattr(config, "input_feat_per_channel", None)
    per_frame = per_channel * getattr(config, "input_channels", 1) if isinstance(per_channel, int) else None
    per_frame = per_frame or getattr(config, "feature_projection_input_dim", None)
    if not isinstance(per_frame, int):
        raise ValueError(f"no known input_features layout for {type(unwrap(model)).__name__}")
    return torch.randn(rows, 32, per_frame, generator=generator).to(dtype)
