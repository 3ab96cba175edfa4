"""What selectors and credit rules may ask of the policy: its hidden state at prompt ends and at prefix ends
(one prefill pass, no tokens generated) and the pool problems' levels; never the trainer itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from mcgrpo.train.batching import autocast, padded
from mcgrpo.train.loss import token_logprobs


@torch.no_grad()
def prefix_features(model, sequences: Sequence[Sequence[int]], ends: Sequence[Sequence[int]], pad_id: int,
                    microbatch_size: int | None = None) -> list[np.ndarray]:
    """The last layer's hidden state at the final token of prefixes of each sequence (`ends[r]`: their
    lengths), as one [prefixes, hidden] array per sequence: what critics regress on. Under bf16
    autocast on a GPU, as generation and the update run, so that the critic's and the filter's
    measured time is not inflated by an fp32 pass the other stages do not pay."""
    device, step = model.device, microbatch_size or len(sequences)
    out: list[np.ndarray] = []
    for start in range(0, len(sequences), step):
        chunk = sequences[start:start + step]
        ids, mask = padded(chunk, pad_id, device)
        with autocast(device):
            hidden = model(input_ids=ids, attention_mask=mask.long(), output_hidden_states=True).hidden_states[-1]
        out += [hidden[r, [e - 1 for e in ends[start + r]]].float().cpu().numpy() for r in range(len(chunk))]
    return out


def prompt_features(model, prompts: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    """The last layer's hidden state at each prompt's final token (one prefill pass)."""
    return np.stack([f[0] for f in prefix_features(model, prompts, [[len(p)] for p in prompts], pad_id)])


def frozen(model) -> torch.nn.Module:
    """A copy of `model` that no optimizer moves: the reference policy of an implicit reward."""
    import copy
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def log_ratio(model, reference, pad_id: int):
    """(contexts, completions) -> log pi_model - log pi_reference per completion token (no gradient)."""
    @torch.no_grad()
    def ratio(contexts, completions) -> list[np.ndarray]:
        now, mask = token_logprobs(model, contexts, completions, pad_id)
        ref, _ = token_logprobs(reference, contexts, completions, pad_id)
        return [(a - b)[m].double().cpu().numpy() for a, b, m in zip(now, ref, mask)]
    return ratio


@dataclass
class PolicyView:
    """The current policy as the pool's problems see it (the model is the training model, updated in place)."""
    model: torch.nn.Module
    prompter: object          # rollout.Prompter: question -> prompt token ids
    problems: list[dict]      # the pool's records, by pool index
    pad_id: int
    microbatch_size: int | None = None

    def features(self, indices) -> np.ndarray:
        """The policy's last hidden state at the end of each pool problem's prompt."""
        return prompt_features(self.model, [self.prompter(self.problems[j]["question"]) for j in indices],
                               self.pad_id)

    def levels(self, indices) -> np.ndarray:
        return np.array([self.problems[j]["level"] for j in indices])

    def prefix_features(self, sequences, ends) -> list[np.ndarray]:
        """The policy's last hidden state at prefix ends of whole sequences (for critics)."""
        return prefix_features(self.model, sequences, ends, self.pad_id, self.microbatch_size)

    def features_function(self):
        """`prefix_features` as a credit rule's `ctx.features`: a plain function, not a method whose `__self__`
        would hand the rule the view and its model."""
        def features(sequences, ends) -> list[np.ndarray]:
            return self.prefix_features(sequences, ends)
        return features


class SelectorView:
    """What a selector is handed as its `view` (mcgrpo.api.PolicyView): the policy's prompt features and the
    problems' levels, and nothing else of the PolicyView it reads them from: not its model (whose generate would
    sample tokens that nothing counts toward B) nor the pool's records (which the run's rollouts are rewarded
    against)."""

    __slots__ = ("_policy",)
    ALLOWED = "features(indices), levels(indices)"

    def __init__(self, policy: PolicyView):
        object.__setattr__(self, "_policy", policy)

    def features(self, indices) -> np.ndarray:
        return self._policy.features(indices)

    def levels(self, indices) -> np.ndarray:
        return self._policy.levels(indices)

    def __getattr__(self, name: str):
        raise AttributeError(f"a selector's view (PolicyView) has no attribute {name!r}; allowed: {self.ALLOWED} "
                             f"(docs/plugins.md)")

    def __setattr__(self, name: str, value) -> None:
        self.__getattr__(name)
