"""Tiny, randomly initialised models without token-id inputs (speech, vision, image-text), built from configs,
no downloads, no dropout; with variable-size examples made on the machine and a collator that pads them.

Wav2Vec2 and HuBERT (CTC, audio classification): 400-800 samples of raw audio (39-79 encoder frames).
ResNet (image classification), Segformer (semantic segmentation): 3 x 32 x 32 pixels. CLIP (image-text
contrastive): token ids of 3-9 tokens and 32 x 32 pixels, no labels (`return_loss=True`).
"""

from __future__ import annotations

import torch
from transformers import (
    CLIPConfig,
    CLIPModel,
    HubertConfig,
    HubertForCTC,
    ResNetConfig,
    ResNetForImageClassification,
    SegformerConfig,
    SegformerForSemanticSegmentation,
    Wav2Vec2Config,
    Wav2Vec2ForCTC,
    Wav2Vec2ForSequenceClassification,
)

NUM_LABELS = 3
CHARACTERS = 12  # CTC vocabulary (0: the blank / pad)
IMAGE = 32
_SPEECH = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_kernel=(10, 3),
    conv_stride=(5, 2),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4,
    vocab_size=CHARACTERS,
    pad_token_id=0,
    num_labels=NUM_LABELS,
    classifier_proj_size=16,
    ctc_loss_reduction="mean",
    mask_time_prob=0.0,  # SpecAugment draws at random in training, as dropout does
    layerdrop=0.0,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    feat_proj_dropout=0.0,
    final_dropout=0.0,
)
_TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=99)
_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=IMAGE)

MODELS = {
    "wav2vec2-ctc": lambda: Wav2Vec2ForCTC(Wav2Vec2Config(**_SPEECH)),
    "wav2vec2-audio-cls": lambda: Wav2Vec2ForSequenceClassification(Wav2Vec2Config(**_SPEECH)),
    "hubert-ctc": lambda: HubertForCTC(HubertConfig(**_SPEECH)),
    "resnet-image-cls": lambda: ResNetForImageClassification(
        ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=NUM_LABELS)
    ),
    "segformer-semantic-seg": lambda: SegformerForSemanticSegmentation(
        SegformerConfig(
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            num_attention_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            mlp_ratios=[2, 2],
            decoder_hidden_size=32,
            num_labels=NUM_LABELS,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            classifier_dropout_prob=0.0,
            drop_path_rate=0.0,
        )
    ),
    "clip-contrastive": lambda: CLIPModel(
        CLIPConfig(
            text_config=dict(_TEXT, max_position_embeddings=16),
            vision_config=dict(_VISION, patch_size=8),
            projection_dim=16,
        )
    ),
}


def _between(low: int, high: int, generator: torch.Generator) -> int:
    """An int in [low, high) from `generator` (never the global random stream)."""
    return int(torch.randint(low, high, (), generator=generator))


def make(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return MODELS[name]()


def examples(name: str, count: int = 12, seed: int = 0) -> list[dict]:
    """`count` examples for the model `name`: uneven audio lengths, or fixed-size images."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        if name.startswith(("wav2vec2", "hubert")):
            row = {"input_values": torch.randn(_between(400, 801, generator), generator=generator)}
            row["labels"] = (
                torch.randint(1, CHARACTERS, (_between(2, 8, generator),), generator=generator)
                if name.endswith("ctc")
                else torch.randint(0, NUM_LABELS, (), generator=generator)
            )
        else:
            row = {"pixel_values": torch.randn(3, IMAGE, IMAGE, generator=generator)}
            if name == "resnet-image-cls":
                row["labels"] = torch.randint(0, NUM_LABELS, (), generator=generator)
            elif name == "segformer-semantic-seg":
                row["labels"] = torch.randint(0, NUM_LABELS, (IMAGE, IMAGE), generator=generator)
            else:  # CLIP: a caption, no labels
                row["input_ids"] = torch.randint(1, 99, (_between(3, 10, generator),), generator=generator)
        rows.append(row)
    return rows


class PadCollator:
    """Right-pads the sequences (`input_values`, `input_ids`: 0, attention mask 0; CTC's character labels:
    -100) and stacks the rest; CLIP batches (no labels) get `return_loss=True`."""

    def __call__(self, features: list[dict]) -> dict:
        batch = {}
        for key in features[0]:
            values = [f[key] for f in features]
            if key not in ("input_values", "input_ids") and not (key == "labels" and values[0].dim() == 1):
                batch[key] = torch.stack(values)
                continue
            batch[key] = torch.nn.utils.rnn.pad_sequence(
                values, batch_first=True, padding_value=-100 if key == "labels" else 0
            )
            if key != "labels":
                lengths = torch.tensor([len(v) for v in values])
                batch["attention_mask"] = (torch.arange(batch[key].shape[1])[None] < lengths[:, None]).long()
        if "labels" not in batch:
            batch["return_loss"] = True
        return batch
