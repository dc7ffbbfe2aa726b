"""Examples for the non-text task mappings, made on the machine from the model's config: random pixels, audio,
features and labels that fit the task, and one collator that pads them.

| task | mapping | one example |
|---|---|---|
| image-cls | IMAGE_CLASSIFICATION | pixel_values [C, H, W], a class id |
| semantic-seg | SEMANTIC_SEGMENTATION | pixel_values, a class id per pixel [H, W] |
| object-detection | OBJECT_DETECTION | pixel_values, {class_labels [n], boxes [n, 4] (cx, cy, w, h) in 0..1} |
| contrastive | ZERO_SHOT_IMAGE_CLASSIFICATION | token ids (3-9) and pixel_values, no labels: `return_loss=True` |
| masked-image | MASKED_IMAGE_MODELING | pixel_values, bool_masked_pos [patches] (half masked) |
| video-cls | VIDEO_CLASSIFICATION | pixel_values [frames, C, H, W], a class id |
| ctc | CTC | audio (below), 2-7 character ids |
| audio-cls | AUDIO_CLASSIFICATION | audio, a class id |
| audio-frame-cls | AUDIO_FRAME_CLASSIFICATION | audio of one length, a one-hot class per encoder frame |
| speech-seq2seq | SPEECH_SEQ_2_SEQ | audio, 2-7 decoder token ids |
| vision-to-text | IMAGE_TEXT_TO_TEXT | pixel_values and token ids (3-12) as labels |

Audio, by the model's `main_input_name`: `input_values` are 4,000-8,000 samples of raw audio (an attention
mask marks the padding), or an AST-style spectrogram [max_length, mel bins] where the config has
`num_mel_bins`; `input_features` are log-mel-like features [mel bins, 2 x max_source_positions]
(Whisper's fixed window) or [64 frames, feature size] (Speech2Text, Wav2Vec2-BERT, Parakeet).
A model of these mappings whose main input is token ids (audio or vision LLMs that splice media tokens
into the text: Voxtral, Granite Speech, Llava) gets text only (`text_only(model)`): the sweep says so.
"""

from __future__ import annotations

import torch
from scripts.tiny_configs import NUM_LABELS, VOCAB
from transformers.models.auto import modeling_auto

MEDIA_TASKS = {
    "image-cls": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "semantic-seg": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "object-detection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "contrastive": "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "masked-image": "MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES",
    "video-cls": "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
    "ctc": "MODEL_FOR_CTC_MAPPING_NAMES",
    "audio-cls": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "audio-frame-cls": "MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
    "speech-seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "vision-to-text": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
}
assert all(hasattr(modeling_auto, mapping) for mapping in MEDIA_TASKS.values())
AUDIO_TASKS = ("ctc", "audio-cls", "audio-frame-cls", "speech-seq2seq")
FEATURE_FRAMES = 64
FEATURE_SIZE_NAMES = ("feature_projection_input_dim", "input_feat_per_channel", "num_mel_bins", "feature_size")


def _between(low: int, high: int, generator: torch.Generator) -> int:
    """An int in [low, high) from `generator` (never the global random stream)."""
    return int(torch.randint(low, high, (), generator=generator))


def _config_value(config, name: str, default=None):
    """`name` on the config or the first sub-config that has it (vision_config, audio_config, encoder...)."""
    if getattr(config, name, None) is not None:
        return getattr(config, name)
    for inner in vars(config).values():
        if hasattr(inner, "to_dict") and getattr(inner, name, None) is not None:
            return getattr(inner, name)
    return default


def image_shape(model) -> tuple[int, int, int]:
    size = _config_value(model.config, "image_size", 32)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    return int(_config_value(model.config, "num_channels", 3)), int(height), int(width)


def text_only(model, task: str) -> bool:
    return task in ("speech-seq2seq", "vision-to-text", *AUDIO_TASKS) and model.main_input_name == "input_ids"


def _vocab(model) -> int:
    from turbotrain import modeling

    return max(min(VOCAB, modeling.vocab_size(model) or modeling.num_classes(model)), 5)


def _audio(model, generator: torch.Generator, samples: int) -> dict:
    config, main = model.config, model.main_input_name
    mel_bins = _config_value(config, "num_mel_bins")
    if main == "input_values" and mel_bins and isinstance(getattr(config, "max_length", None), int):
        return {main: torch.randn(config.max_length, mel_bins, generator=generator)}  # AST: [T, mel]
    if main == "input_values":
        return {main: torch.randn(samples, generator=generator)}
    positions = _config_value(config, "max_source_positions")
    if mel_bins and positions and model.config.model_type.startswith("whisper"):
        return {main: torch.randn(mel_bins, 2 * positions, generator=generator)}  # Whisper: [mel, 2 x positions]
    size = next((_config_value(config, n) for n in FEATURE_SIZE_NAMES if _config_value(config, n)), 80)
    return {main: torch.randn(FEATURE_FRAMES, int(size), generator=generator)}


def _frames(model, row: dict) -> int:
    """Encoder frames of `row`'s audio (one no-grad forward)."""
    with torch.no_grad():
        return model.eval()(**{k: v[None] for k, v in row.items()}).logits.shape[1]


def _media_row(model, task: str, generator: torch.Generator, samples: int) -> dict:
    channels, height, width = image_shape(model)
    vocab = _vocab(model)
    if task in AUDIO_TASKS:
        row = _audio(model, generator, samples)
        if task in ("ctc", "speech-seq2seq"):
            low = 1 if task == "ctc" else 4  # CTC: 0 is the blank
            row["labels"] = torch.randint(low, vocab, (_between(2, 8, generator),), generator=generator)
        elif task == "audio-cls":
            row["labels"] = torch.randint(0, NUM_LABELS, (), generator=generator)
        return row
    pixels = torch.randn(channels, height, width, generator=generator)
    if task == "video-cls":
        frames = int(_config_value(model.config, "num_frames", 4))
        return {model.main_input_name: pixels.expand(frames, -1, -1, -1).clone(), "labels": torch.tensor(1)}
    row = {"pixel_values": pixels}
    if task == "image-cls":
        row["labels"] = torch.randint(0, NUM_LABELS, (), generator=generator)
    elif task == "semantic-seg":
        row["labels"] = torch.randint(0, NUM_LABELS, (height, width), generator=generator)
    elif task == "object-detection":
        boxes = torch.rand(2, 4, generator=generator) * 0.4 + 0.2  # centres and sizes inside the image
        row["labels"] = {"class_labels": torch.randint(0, NUM_LABELS, (2,), generator=generator), "boxes": boxes}
    elif task == "masked-image":
        patch = int(_config_value(model.config, "patch_size", 16))
        patches = (height // patch) * (width // patch)
        row["bool_masked_pos"] = torch.rand(patches, generator=generator) < 0.5
    elif task in ("contrastive", "vision-to-text"):
        length = _between(3, 10 if task == "contrastive" else 13, generator)
        row["input_ids"] = torch.randint(4, vocab, (length,), generator=generator)
        if task == "vision-to-text":
            row["labels"] = row["input_ids"].clone()
    return row


def examples(model, task: str, count: int = 12, seed: int = 0) -> list[dict]:
    """`count` examples for `task` fitting `model` (uneven audio and text lengths; images of one size)."""
    generator = torch.Generator().manual_seed(seed)
    if text_only(model, task):
        rows = []
        for _ in range(count):
            ids = torch.randint(4, _vocab(model), (_between(3, 13, generator),), generator=generator)
            rows.append({"input_ids": ids, "labels": ids.clone()})
        return rows
    fixed = task == "audio-frame-cls"  # one length, so one frame count for every row's labels
    rows = [
        _media_row(model, task, generator, 6000 if fixed else _between(4000, 8001, generator)) for _ in range(count)
    ]
    if fixed:
        frames = _frames(model, rows[0])
        for row in rows:
            classes = torch.randint(0, NUM_LABELS, (frames,), generator=generator)
            row["labels"] = torch.nn.functional.one_hot(classes, NUM_LABELS).float()
    return rows


class MediaCollator:
    """Right-pads 1-D sequences (raw audio and token ids with the pad id, attention mask 0; label sequences
    with -100), stacks the rest, keeps detection targets as a list of dicts; a batch without labels gets
    `return_loss=True` (contrastive models)."""

    PADDED = ("input_values", "input_ids")

    def __init__(self, pad_token_id: int = 0):
        self.pad = pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        batch = {}
        for key in features[0]:
            values = [f[key] for f in features]
            if isinstance(values[0], dict):
                batch[key] = values
            elif key in self.PADDED and values[0].dim() == 1:
                fill = self.pad if key == "input_ids" else 0.0
                batch[key] = torch.nn.utils.rnn.pad_sequence(values, batch_first=True, padding_value=fill)
                lengths = torch.tensor([len(v) for v in values])
                batch["attention_mask"] = (torch.arange(batch[key].shape[1])[None] < lengths[:, None]).long()
            elif key == "labels" and values[0].dim() == 1 and values[0].dtype == torch.long:
                batch[key] = torch.nn.utils.rnn.pad_sequence(values, batch_first=True, padding_value=-100)
            else:
                batch[key] = torch.stack(values)
        if "labels" not in batch:
            batch["return_loss"] = True
        return batch
