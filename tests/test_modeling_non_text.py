"""`modeling`'s questions on models that have no token input, no embedding table or no output head: each answer
is "none" (None, 0, a reason), never an exception (issue 27: Transformers raises `NotImplementedError` from
`get_input_embeddings` on speech and vision models)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.tiny_non_text import MODELS, make
from tests.tiny_seq2seq import make as make_seq2seq
from turbotrain import modeling


@pytest.mark.parametrize("name", list(MODELS))
def test_every_question_answers_none_for_a_model_without_token_embeddings(name):
    model = make(name)  # Transformers' get_input_embeddings() raises NotImplementedError on each
    assert modeling.input_embedding(model) is None and modeling.vocab_size(model) is None
    assert modeling.output_projection(model) is None and modeling.output_linear(None) is None
    assert modeling.attends_ahead(model) is None and modeling.reads_masked_positions(model) is None
    assert modeling.draws_at_random(model) is None
    assert modeling.has_causal_attention(model) in (True, False)
    assert modeling.position_offset(model) == 0 and isinstance(modeling.pad_token_id(model), int)
    assert modeling.num_classes(model) >= 1 and modeling.task_of(model) in (None, modeling.SEQUENCE_CLASSIFICATION)
    assert type(model).__name__ in modeling.without_token_input(model)


def test_the_reason_names_the_input_a_model_takes_instead():
    assert modeling.without_token_input(make("wav2vec2-ctc")) == "Wav2Vec2ForCTC takes input_values, not token ids"
    assert modeling.without_token_input(make("resnet-image-cls")).endswith("takes pixel_values, not token ids")
    assert modeling.without_token_input(make("clip-contrastive")) == "CLIPModel has no input embedding table"


def test_a_speech_encoder_decoder_keeps_its_decoder_embedding():
    whisper = make_seq2seq("whisper")  # input_features in, token ids out: the decoder's table is the input embedding
    assert type(modeling.input_embedding(whisper)) is nn.Embedding
    assert (
        modeling.without_token_input(whisper) == "WhisperForConditionalGeneration takes input_features, not token ids"
    )


class _Raising(nn.Module):
    def __init__(self, error: type[Exception]):
        super().__init__()
        self.error, self.layer = error, nn.Linear(2, 2)

    def get_input_embeddings(self):
        raise self.error("no embeddings here")

    def get_output_embeddings(self):
        return "not a module"


@pytest.mark.parametrize("error", [NotImplementedError, AttributeError])
def test_accessors_that_raise_or_return_no_module_mean_none(error):
    model = _Raising(error)
    assert modeling.module_or_none(model, "get_input_embeddings") is None
    assert modeling.module_or_none(model, "get_output_embeddings") is None
    assert modeling.module_or_none(model, "get_decoder") is None  # no such method
    assert modeling.vocab_size(model) is None and modeling.output_projection(model) is None


def test_other_errors_of_an_accessor_are_not_hidden():
    with pytest.raises(ValueError):
        modeling.module_or_none(_Raising(ValueError), "get_input_embeddings")


def test_synthetic_batch_of_a_model_without_embeddings_still_fits_its_labels():
    model = make("wav2vec2-audio-cls")
    batch = modeling.synthetic_batch(model, [3, 5], seed=0)
    assert batch["labels"].shape == (2,) and int(batch["labels"].max()) < model.config.num_labels
    assert torch.equal(batch["attention_mask"].sum(1), torch.tensor([3, 5]))


def test_speech2text_gets_features_in_its_layout_and_label_sparsity_checks_on_them():
    from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

    from turbotrain import optimize

    config = Speech2TextConfig(
        vocab_size=50, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, conv_channels=16,
        input_feat_per_channel=12, max_source_positions=64, max_target_positions=64, dropout=0.0,
    )  # fmt: skip
    model = Speech2TextForConditionalGeneration(config)
    batch = modeling.synthetic_batch(model, [5, 3], seed=0)
    assert batch["input_features"].shape == (2, 32, 12)  # [B, frames, features]: it used to ask for num_mel_bins
    assert optimize(model).label_sparsity is not None  # its self-check raised AttributeError at construction


def test_a_feature_layout_it_cannot_tell_fails_the_self_check_instead_of_raising():
    from transformers import PretrainedConfig

    from turbotrain.passes.self_check import check_batch

    class Features(nn.Module):
        main_input_name = "input_features"

        def __init__(self):
            super().__init__()
            self.config, self.embed = PretrainedConfig(), nn.Embedding(10, 4)

        def get_input_embeddings(self):
            return self.embed

    batch, problem = check_batch(Features(), [3, 2], seed=0)
    assert batch is None and "no known input_features layout for Features" in problem
