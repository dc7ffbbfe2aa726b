"""A separate reference model's fused-head calls, answered like the policy's: only the scored rows reach the head.

TRL's `DPOTrainer` with a `ref_model` (full fine-tuning) calls it in every step (GRPOTrainer and RLOOTrainer
with `beta > 0`: at each generation, its logits divided by the sampling temperature as the policy's), under
`no_grad` and in eval mode, as `ref_model(**batch, labels=labels, fused_lm_head=True)` and reads `.log_probs` [B, T - 1]
(TRL's `add_fused_lm_head` with its default outputs: log-probs only, the other fields None). On a device
without Triton TRL's kernel scores every position, prompt and padding included. Here the reference model
gets the policy's answer to those calls (passes/fused_head_calls.py): label sparsity gathers the completion
rows [B, T, H] -> [K, H] and the chunked op (chunked_ce/logprobs.py, no gradient: one matmul per chunk, nothing
saved, no statistics) gives their log-probs, scattered back to [B, T - 1] with zeros elsewhere, as TRL's.
Only fused calls are answered (`LabelSparsity.fused_calls_in_eval`); any other call of the reference model
runs as it is. A LoRA run's reference is the policy with its adapters off: the policy's own pass answers it.

Installed only where the policy's chunked head answers its fused calls (`fused_weighting` set: the trainer's
weighting is known, chunked cross-entropy is on), and the reference is a plain model (not a DeepSpeed or FSDP
wrapper: the TRL table's reference model, integrations/trl/). Self-check: none where the reference has the policy's
class and configuration (the policy's checks ran on the same computation; a check would also page in the
weights of a reference TRL loaded from a file, which stock reads only at its first step); else the passes'
own, and a reference that fails them keeps TRL's path (one warning).

Exact: the same fp32 log-sum-exp per row as TRL's kernel (float order only, ≤1e-5 relative:
tests/llm/test_trl_dpo.py compares the losses and every metric with stock DPOTrainer's).
"""

from __future__ import annotations

from typing import Any

from torch import nn

# where the weights came from, and `use_cache` (GRPOTrainer turns it off on the policy only; a KV cache changes no
# score of a forward over whole rows): settings that leave the head's computation as it is
IGNORED_CONFIG_KEYS = ("_name_or_path", "transformers_version", "use_cache")


def same_model(reference: nn.Module, policy: nn.Module) -> bool:
    """`reference` has `policy`'s class and configuration (so the policy's self-checks stand for it)."""
    if type(reference) is not type(policy) or not hasattr(reference, "config") or not hasattr(policy, "config"):
        return False

    def settings(model: nn.Module) -> dict:
        return {k: v for k, v in model.config.to_dict().items() if k not in IGNORED_CONFIG_KEYS}

    return settings(reference) == settings(policy)


def answer_reference_calls(reference: nn.Module | None, policy_pass, apply) -> Any:
    """Label sparsity (built by `apply`: `apply_label_sparsity`) with the chunked head on `reference`, answering its
    fused calls (module docstring); None where the policy's calls are not answered (`policy_pass`: the policy's
    LabelSparsity) or no reference."""
    chunked = policy_pass.chunked_head
    if reference is None or chunked is None or chunked.fused_weighting is None:
        return None
    policy = policy_pass.model.get_base_model() if hasattr(policy_pass.model, "get_base_model") else policy_pass.model
    same = same_model(reference, policy)
    installed = apply(
        reference,
        check=not same,
        chunked_cross_entropy="always",
        fused_head_calls=chunked.fused_weighting,
    )
    if installed is None or installed.chunked_head is None:
        if installed is not None:
            installed.remove()
        return None
    installed.fused_calls_in_eval = True
    installed.checked = not same  # the policy's checks stand for a reference of its class and configuration
    installed.chunked_head.fused_stats = False  # TRL reads the reference's log-probs only
    installed.chunked_head.temperature = chunked.temperature  # TRL patches both heads with the same one (GRPO, RLOO)
    return installed
