"""The one place that understands models: what task, which head, causal or not, how long, and a synthetic
batch.

Every pass and the exporter ask this package, so a new model kind (a PEFT wrapper, an encoder-decoder)
is taught here once; every private Transformers name it needs is `hf_boundary`'s. One job a file, each
seeing a PEFT wrapper through (`unwrap`) and answering "none" (None, 0, []) for a model without the part
asked about, never raising:

* tasks.py: the task (`task_of`, `TASKS`, `is_causal_lm`, `is_seq2seq_lm`, `is_language_model`), the
  wrapper (`unwrap`, `is_peft_model`, `prompt_learning`: PEFT's virtual tokens), the seq2seq decoder's inputs
  and length limit, `dropout_rate`.
* parts.py: the head and input embedding that run (`output_projection`, `output_linear`,
  `input_embedding`, `module_or_none`), why a model takes no token ids (`without_token_input`), sizes
  (`vocab_size`, `pad_token_id`, `num_classes`), `final_logit_softcapping`, `repeated_blocks`.
* probes.py: what tiny forwards of the base model show (`attends_ahead`, `reads_masked_positions`,
  `draws_at_random`), and `has_causal_attention`, which asks the layers' flags first.
* lengths.py: positions, windows and RoPE rules (`position_offset`, `max_positions`, `position_limit`,
  `attention_spans`, `layer_types`, `length_dependent_rope`).
* gated_mlp.py: the gated MLPs (`gated_mlps`: `down_proj(act_fn(gate_proj(x)) * up_proj(x))` by its layout) and
  whether an activation keeps only its input for the backward (`keeps_only_its_input`).
* synthetic.py: `synthetic_batch` (and `speech_features`) for the self-checks and the exporter.

Import order inside the package: tasks <- parts <- probes; tasks <- lengths; tasks, parts <- synthetic.
"""

from turbotrain.modeling.gated_mlp import gated_mlps, keeps_only_its_input
from turbotrain.modeling.lengths import (
    SPAN_FIELDS,
    attention_spans,
    layer_types,
    length_dependent_rope,
    max_positions,
    position_limit,
    position_offset,
)
from turbotrain.modeling.parts import (
    final_logit_softcapping,
    input_embedding,
    module_or_none,
    num_classes,
    output_linear,
    output_projection,
    pad_token_id,
    repeated_blocks,
    vocab_size,
    without_token_input,
)
from turbotrain.modeling.probes import (
    attends_ahead,
    draws_at_random,
    has_causal_attention,
    outputs_differ,
    reads_masked_positions,
)
from turbotrain.modeling.synthetic import speech_features, synthetic_batch
from turbotrain.modeling.tasks import (
    CAUSAL_LM,
    MASKED_LM,
    PER_TOKEN_TASKS,
    SEQ2SEQ_LM,
    SEQUENCE_CLASSIFICATION,
    TASKS,
    TOKEN_CLASSIFICATION,
    PromptLearning,
    decoder_input_ids,
    decoder_length_limit,
    dropout_rate,
    is_causal_lm,
    is_language_model,
    is_peft_model,
    is_seq2seq_lm,
    prompt_learning,
    task_of,
    unwrap,
)
from turbotrain.utils.batch_keys import IGNORE_INDEX  # the label Transformers' losses skip (named here for every pass)

__all__ = [
    "CAUSAL_LM",
    "IGNORE_INDEX",
    "MASKED_LM",
    "PER_TOKEN_TASKS",
    "PromptLearning",
    "SEQ2SEQ_LM",
    "SEQUENCE_CLASSIFICATION",
    "SPAN_FIELDS",
    "TASKS",
    "TOKEN_CLASSIFICATION",
    "attends_ahead",
    "attention_spans",
    "decoder_input_ids",
    "decoder_length_limit",
    "draws_at_random",
    "dropout_rate",
    "final_logit_softcapping",
    "gated_mlps",
    "has_causal_attention",
    "input_embedding",
    "is_causal_lm",
    "is_language_model",
    "is_peft_model",
    "is_seq2seq_lm",
    "keeps_only_its_input",
    "layer_types",
    "length_dependent_rope",
    "max_positions",
    "module_or_none",
    "num_classes",
    "output_linear",
    "output_projection",
    "outputs_differ",
    "pad_token_id",
    "position_limit",
    "position_offset",
    "prompt_learning",
    "reads_masked_positions",
    "repeated_blocks",
    "speech_features",
    "synthetic_batch",
    "task_of",
    "unwrap",
    "vocab_size",
    "without_token_input",
]
