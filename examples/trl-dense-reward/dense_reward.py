"""A TRL arm's script: your own GRPOTrainer, with a reward that generates continuations and charges them.

mcgrpo calls `trainer(setup)` in the train job of an arm with `trainer: {trl: {script: <this file>}}` and trains
what it returns under the protocol (mcgrpo.integrations.trl): it counts the rollouts, stops at B, evaluates and
stores the run. `setup` holds the study's model and tokenizer, the GRPOConfig of its recipe (`setup.args`), the
prompt stream (`setup.dataset`: prompt, answer, problem_id) and the study's verifier as a reward (`setup.reward`).

The reward here is of the Monte-Carlo kind: each completion is cut at half its length and continued once by the
policy; its reward is the mean of the completion's verdict and the continuation's. The continuation's tokens are
generated compute, so they are charged to the run's budget with `mcgrpo.api.charge`: without that call, this arm
would spend more than B while reporting B.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from mcgrpo.api import charge


def trainer(setup) -> GRPOTrainer:
    model, tokenizer, limit = setup.model, setup.tokenizer, setup.args.max_completion_length

    def prompt_ids(prompt) -> list[int]:  # rendered as TRL (and mcgrpo's Prompter) render it
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False,
                                             **(setup.args.chat_template_kwargs or {}))
        return tokenizer(text, add_special_tokens=False).input_ids

    def continued(prompts, completions, completion_ids, answer, **_) -> list[float]:
        outcome = setup.reward(completions=completions, answer=answer)
        texts = []
        for prompt, ids in zip(prompts, completion_ids):
            kept = list(ids[: len(ids) // 2])
            context = torch.tensor([prompt_ids(prompt) + kept], device=model.device)
            with torch.no_grad():
                out = model.generate(context, attention_mask=torch.ones_like(context), do_sample=True,
                                     max_new_tokens=limit - len(kept), temperature=setup.args.temperature,
                                     top_p=setup.args.top_p, top_k=0, pad_token_id=tokenizer.pad_token_id)
            new = out[0, context.shape[1]:].tolist()
            if tokenizer.eos_token_id in new:  # what follows the end token was never generated for use
                new = new[: new.index(tokenizer.eos_token_id) + 1]
            charge(len(new))  # the continuation's tokens count toward B
            texts.append(tokenizer.decode(kept + new, skip_special_tokens=True))
        rest = setup.reward(completions=texts, answer=answer)
        return [(a + b) / 2 for a, b in zip(outcome, rest)]

    return GRPOTrainer(model=model, reward_funcs=[continued], args=setup.args, train_dataset=setup.dataset,
                       processing_class=tokenizer)
