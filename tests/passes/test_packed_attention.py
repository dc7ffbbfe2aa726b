"""Packed attention (padding-free's "sequences" mode): each sequence attends within itself, no mask is built,
rows hold the whole batch, and the loss and every gradient are stock's on the padded batch (fp32 <= 1e-5)."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
import transformers
from packaging import version
from torch.utils._python_dispatch import TorchDispatchMode

from tests.parity import assert_same, loss_and_grads
from tests.tiny_models import make, padded_batch
from turbotrain import optimize
from turbotrain.boundaries import hf_boundary
from turbotrain.passes.padding_free import attention_kernels, kernel_choice
from turbotrain.passes.padding_free.packed_attention import PREFIX
from turbotrain.passes.padding_free.packed_sequences import PACKED_SEQUENCES, sequence_metadata

VOCAB = 97
WINDOW = 8
ONE_LONG_MANY_SHORT = [40, 1, 3, 2, 9, 1, 5, 2, 11, 1, 7]  # the long one and three more outrun the window
DECODER = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, max_position_embeddings=128,
    num_attention_heads=4, head_dim=8, pad_token_id=0, attention_dropout=0.0, classifier_dropout=0.0,
)  # fmt: skip


# Transformers 5.0 (the oldest release CI runs the core tests on) cannot switch a model's attention at run time
# the way the packed-attention function needs, so padding-free keeps its mask modes there (exact, tested in
# test_padding_free*.py); these tests pin the release the suite runs on.
OLD_RELEASE = version.parse(transformers.__version__) < version.parse("5.24")
pytestmark = pytest.mark.skipif(OLD_RELEASE, reason=f"Transformers {transformers.__version__}: no packed attention")


def _qwen2(task):
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

    config = Qwen2Config(**DECODER, num_key_value_heads=1)  # GQA 4:1
    return (Qwen2ForCausalLM if task == "lm" else Qwen2ForTokenClassification)(config)


def _mistral(task):
    from transformers import MistralConfig, MistralForCausalLM, MistralForTokenClassification

    config = MistralConfig(**DECODER, num_key_value_heads=2, sliding_window=WINDOW)
    return (MistralForCausalLM if task == "lm" else MistralForTokenClassification)(config)


def _gemma2(task, softcap=0.5):
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma2ForTokenClassification

    config = Gemma2Config(
        **DECODER, num_key_value_heads=2, sliding_window=WINDOW, attn_logit_softcapping=softcap,
        query_pre_attn_scalar=8, attn_implementation="eager",
    )  # fmt: skip
    model = (Gemma2ForCausalLM if task == "lm" else Gemma2ForTokenClassification)(config)
    with torch.no_grad():  # scores of a few units, so the 0.5 soft-cap binds (random init gives ~0.01)
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(20)
    return model


BUILDERS = {"qwen2": _qwen2, "mistral": _mistral, "gemma2": _gemma2}
CASES = [
    (family, task)
    for family in ("bert", "roberta", "gpt2", "llama", "qwen2", "mistral", "gemma2")
    for task in ("lm", "tok")
] + [("bert", "cls"), ("roberta", "cls")]


def _model(family, task):
    torch.manual_seed(0)
    if family in BUILDERS:
        return BUILDERS[family](task)
    return make(family, task=task, dropout=False)


def _batch(model, task, lengths=ONE_LONG_MANY_SHORT, seed=0):
    batch = padded_batch(lengths, task=task, keep=0.6, seed=seed, pad_token_id=model.config.pad_token_id or 0)
    if task == "tok":
        batch["labels"] = batch["labels"].clamp(max=model.config.num_labels - 1)
    return batch


def _packed_model(family, task, **options):
    model = _model(family, task)
    stock = copy.deepcopy(model)
    report = optimize(model, label_sparsity=False, embedding_grad=False, fused_activation=False, **options)
    installed = report.padding_free
    assert installed is not None and installed.spec.mask == "sequences" and installed.attention is not None
    return stock, model, report


@pytest.mark.parametrize("row_tokens", ["auto", 24])
@pytest.mark.parametrize("family,task", CASES)
def test_packed_attention_matches_padded_stock(family, task, row_tokens):
    stock, model, report = _packed_model(family, task, padding_free_row_tokens=row_tokens)
    padded = _batch(model, task)
    packed = report.collator(lambda features: features)(dict(padded))
    assert packed["attention_mask"].dim() == 2 and packed["input_ids"].numel() < padded["input_ids"].numel()
    assert (packed["input_ids"].shape[0] == 1) == (row_tokens == "auto")
    assert_same(loss_and_grads(stock, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family,task", [("bert", "lm"), ("llama", "lm"), ("gemma2", "lm"), ("mistral", "tok")])
def test_padded_batches_through_packed_attention_are_stocks_to_the_bit(family, task):
    # evaluation batches stay padded: the function hands them to the model's own attention with its own mask
    stock, model, _ = _packed_model(family, task)
    padded = _batch(model, task)
    stock.eval(), model.eval()
    with torch.no_grad():
        assert torch.equal(model(**padded).logits, stock(**padded).logits)


def test_the_soft_cap_binds_in_the_gemma2_case():
    # so the Gemma-2 cases above would fail if packed attention dropped the soft-cap
    capped, uncapped = _gemma2("lm"), _gemma2("lm", softcap=None)
    uncapped.load_state_dict(capped.state_dict())
    batch = _batch(capped, "lm")
    with torch.no_grad():
        gap = (capped(**batch).logits - uncapped(**batch).logits).abs().max()
    assert gap > 1e-2 * capped(**batch).logits.abs().max()


def test_remove_restores_the_models_attention():
    stock, model, report = _packed_model("llama", "lm")
    assert hf_boundary.attention_implementation(model.config) == PREFIX + "sdpa"
    report.undo()
    assert hf_boundary.attention_implementation(model.config) == "sdpa"
    model.eval(), stock.eval()
    batch = _batch(model, "lm")
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, stock(**batch).logits)


def test_gradient_checkpointing_recomputes_within_each_sequence():
    # the recomputation reads the segment metadata from the layer's keyword arguments, not from the hook
    stock, model, report = _packed_model("mistral", "lm")
    for m in (stock, model):
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    padded = _batch(model, "lm")
    packed = report.collator(lambda features: features)(dict(padded))
    assert_same(loss_and_grads(stock, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


class _Shapes(TorchDispatchMode):
    """Records the shape of every tensor any op returns (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.shapes: set[tuple[int, ...]] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.shapes.add(tuple(value.shape))
        return out


def _square_shapes(family, attention):
    model = _model(family, "lm")
    report = optimize(model, label_sparsity=False, padding_free_attention=attention)
    packed = report.collator(lambda features: features)(_batch(model, "lm"))
    capacity = packed["input_ids"].shape[1]
    recorded = _Shapes()
    with recorded:
        model(**packed).loss.backward()
    squares = {s for s in recorded.shapes if len(s) >= 2 and s[-2:] == (capacity, capacity)}
    batch_squares = [k for k, v in packed.items() if torch.is_tensor(v) and v.dim() >= 3]
    return squares, batch_squares


@pytest.mark.parametrize("family", ["bert", "llama", "mistral", "gemma2"])
def test_the_packed_path_builds_no_row_by_row_tensor(family):
    # per length (or a varlen kernel): none; the row mask kernel builds one, and is chosen only where faster
    with kernel_choice.forced("per_length"):
        squares, batch_squares = _square_shapes(family, "packed")
    assert not squares and not batch_squares
    squares, batch_squares = _square_shapes(family, "masks")  # the mask modes do: the recorder sees them
    assert squares


def test_stocks_flattening_collator_on_an_encoder_and_packing_stays_exact():
    # DataCollatorWithFlattening concatenates sequences with restarting position_ids and no mask. A causal
    # model's masking_utils builds the packed mask from them; an encoder's bidirectional mask does so only from
    # Transformers 5.25 (create_bidirectional_mask takes position_ids): before, on SDPA every BERT token
    # attended across the other sequences. turbotrain's packing stays exact on both.
    from transformers import DataCollatorWithFlattening
    from transformers.masking_utils import create_bidirectional_mask

    model = make("bert", dropout=False).eval()
    padded = _batch(model, "lm", lengths=[9, 5, 7])
    lengths = padded["attention_mask"].sum(1).tolist()
    features = [{"input_ids": row[:n].tolist()} for row, n in zip(padded["input_ids"], lengths)]
    flat = DataCollatorWithFlattening(return_tensors="pt")(features)
    stock = copy.deepcopy(model)
    with torch.no_grad():
        expected = stock(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
        expected = expected[padded["attention_mask"].bool()]  # [N, V], batch order
        flattened = stock(input_ids=flat["input_ids"], position_ids=flat["position_ids"]).logits[0]
    gap = (flattened - expected).abs().max()
    if "position_ids" in inspect.signature(create_bidirectional_mask).parameters:
        assert gap < 1e-5  # stock keeps the sequences apart (float rounding: ~1e-7)
    else:
        assert gap > 1e-4  # sequences attended across each other

    report = optimize(model, label_sparsity=False)
    packed = report.collator(lambda f: f)({k: v for k, v in padded.items() if k != "labels"})
    with torch.no_grad():
        logits = model(**packed).logits.reshape(-1, model.config.vocab_size)
    within = torch.cat([torch.arange(n) for n in lengths])
    places = torch.repeat_interleave(packed["turbotrain_sequence_starts"], torch.tensor(lengths)) + within
    torch.testing.assert_close(logits[places], expected, rtol=1e-5, atol=1e-5)


def test_sequence_metadata_covers_every_token_and_groups_by_length():
    # rows [a a a b | c c _ _]: segments a=0, b=1, c=2 and the second row's tail 3 + 1 = 4
    segments = torch.tensor([[0, 0, 0, 1], [2, 2, 4, 4]])
    lengths, starts = torch.tensor([3, 1, 2]), torch.tensor([0, 3, 4])
    meta = sequence_metadata(segments, lengths, starts)
    assert meta["cu_seq_lens_q"].tolist() == [0, 3, 4, 6, 8] and meta["cu_seq_lens_q"].dtype == torch.int32
    assert meta["max_length_q"] == 3 and isinstance(meta["max_length_k"], int)
    assert meta[PACKED_SEQUENCES].groups == ((1, 1), (1, 2), (1, 3))
    assert meta[PACKED_SEQUENCES].order.tolist() == [3, 4, 5, 0, 1, 2]


def test_two_rows_of_one_sequence_each_stay_two_segments():
    # the same sequence id never spans rows, but a row that starts where the last ended must open a segment
    meta = sequence_metadata(torch.tensor([[0, 0], [1, 1]]), torch.tensor([2, 2]), torch.tensor([0, 2]))
    assert meta["cu_seq_lens_q"].tolist() == [0, 2, 4] and meta[PACKED_SEQUENCES].groups == ((2, 2),)


def test_a_model_that_cannot_switch_keeps_the_mask_modes(monkeypatch):
    monkeypatch.setattr(hf_boundary, "set_attention_implementation", lambda model, name: False)
    model = make("llama", dropout=False)
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.mask == "block"
    assert hf_boundary.attention_implementation(model.config) == "sdpa"


def test_dense_mask_modes_keep_rows_at_the_longest_sequence():
    model = make("llama", dropout=False)
    report = optimize(model, label_sparsity=False, padding_free_attention="masks", padding_free_row_tokens="auto")
    packed = report.collator(lambda f: f)(_batch(model, "lm"))
    assert packed["input_ids"].shape[1] == 40 < packed["input_ids"].numel()  # C^2 per row: rows stay at the longest


def _flash_like(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """A CPU stand-in for Transformers' flash path with its contract: varlen on `cu_seq_lens_q` over the flattened
    rows when given (`max_length_q` an int), else unpadded by the 2-D mask, else each row whole."""
    rows, heads, length, _ = query.shape
    q, k, v = (x.transpose(1, 2).reshape(rows * length, x.shape[1], x.shape[3]) for x in (query, key, value))
    if kwargs.get("cu_seq_lens_q") is not None:
        assert attention_mask is None and isinstance(kwargs["max_length_q"], int)
        bounds = kwargs["cu_seq_lens_q"].tolist()
    elif attention_mask is not None:  # right padding: each row's real tokens, its pads alone
        real = attention_mask.sum(1).tolist()
        bounds = sorted({0, *(r * length + n for r, n in enumerate(real)), *(r * length for r in range(rows + 1))})
    else:
        bounds = list(range(0, rows * length + 1, length))
    out = torch.zeros(rows * length, heads, value.shape[-1])
    for start, end in zip(bounds, bounds[1:]):
        part = [x[start:end].transpose(0, 1)[None] for x in (q, k, v)]  # [1, H, l, D]
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(
            *part, is_causal=module.is_causal, scale=scaling, enable_gqa=True
        )[0].transpose(0, 1)
    return out.view(rows, length, heads, -1), None


def test_flash_attention_models_are_packed_through_transformers_varlen_keywords(monkeypatch):
    # a flash model takes no mask: it is packed (no longer refused) with `cu_seq_lens_q` / `max_length_q`, the
    # keywords Transformers' flash path reads from the model's kwargs (here a CPU stand-in with that contract)
    from transformers import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, "flash_attention_2", _flash_like)
    model = make("llama", dropout=False)
    model.config._attn_implementation = "flash_attention_2"
    stock = copy.deepcopy(model)
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.mask == "sequences"
    assert report.padding_free.attention is None  # not switched: flash reads the keywords itself
    padded = _batch(model, "lm")
    packed = report.collator(lambda features: features)(dict(padded))
    assert_same(loss_and_grads(stock, padded), loss_and_grads(model, packed), rtol=1e-5, atol=1e-6)


@pytest.mark.requires_compiler
@pytest.mark.parametrize("family,mode", [("llama", "positions"), ("bert", "layers")])
def test_flex_attention_models_are_packed_with_block_masks(family, mode):
    # flex attention adds a dense mask to its scores, so it gets masking_utils' block masks: from the restarting
    # position_ids (causal) or the segments (one mask for every layer). Flex has no backward on CPU: the
    # install's self-check compares every token's logits, padded vs packed, in eval mode
    model = make(family, dropout=False)
    model.set_attn_implementation("flex_attention")
    report = optimize(model, label_sparsity=False)
    assert report.padding_free is not None and report.padding_free.spec.mask == mode


def test_compiled_packed_training_stops_recompiling_and_matches_eager():
    # the per-length loop and the batch's lengths stay out of Dynamo's graphs (torch.compiler.disable, one
    # opaque PackedSequences): lengths that change every batch must not recompile every batch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    eager, model, report = _packed_model("llama", "lm")
    compiled = copy.deepcopy(model)
    compiled.compile(backend="eager")  # Dynamo's tracing and guards, without Inductor's code generation
    graphs = []
    for step, lengths in enumerate([[9, 3, 5], [7, 7, 2, 1], [12, 4], [5, 6, 7, 8], [3, 3, 3], [10, 1, 9, 2, 8]]):
        packed = report.collator(lambda features: features)(padded_batch(lengths, seed=step))
        assert_same(loss_and_grads(model, packed), loss_and_grads(compiled, packed), rtol=1e-5, atol=1e-6)
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[-1] == graphs[-3], graphs  # the last batches compile nothing new


def test_gqa_calls_take_torchs_varlen_kernel_only_where_it_has_enable_gqa(monkeypatch):
    import torch.nn.attention.varlen as varlen

    def kernel_2_11(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):  # torch 2.11's
        raise AssertionError("not called")

    def kernel_2_9(q, k, v, cu_q, cu_k, max_q, max_k, is_causal=False, return_aux=None):  # its first release's
        raise AssertionError("not called")

    assert attention_kernels.torch_varlen_takes(6, 2)  # this torch's varlen_attn has enable_gqa
    monkeypatch.setattr(varlen, "varlen_attn", kernel_2_11)
    assert not attention_kernels.torch_varlen_takes(6, 2)  # GQA: another kernel (measured faster than repeating KV)
    assert attention_kernels.torch_varlen_takes(6, 6)  # no GQA: the kernel
    monkeypatch.setattr(varlen, "varlen_attn", kernel_2_9)
    assert not attention_kernels.torch_varlen_takes(6, 6)  # no scale nor window_size keyword: not this kernel


def test_per_length_output_takes_the_attentions_dtype_under_autocast():
    # on CUDA under bf16 autocast, rotary embeddings leave fp32 queries while SDPA returns bf16 (seen on an H200)
    from turbotrain.passes.padding_free.packed_sequences import PackedSequences

    query = torch.randn(1, 2, 5, 4)  # [R, H, C, D], fp32: one row, two sequences (3 and 2 tokens)
    sequences = PackedSequences(torch.arange(5), ((1, 3), (1, 2)))

    def stock(module, q, k, v, mask, **kwargs):  # the model's attention, answering in bf16
        return q.transpose(1, 2).to(torch.bfloat16), None

    call = attention_kernels.PackedCall(stock, "sdpa", None, query, query, query, sequences, True, {})
    out = attention_kernels.per_length(call)
    assert out.dtype == torch.bfloat16 and out.shape == (5, 2, 4)
    assert torch.equal(out, query[0].transpose(0, 1).to(torch.bfloat16))
