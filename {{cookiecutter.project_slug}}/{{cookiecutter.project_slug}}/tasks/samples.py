"""What the trained language model writes: a few greedy continuations of eval prompts, printed after the run.

A loss says how well the model predicts; a continuation shows what it learned (or that it repeats one word).
They are generated on the host's CPU from the exported folder, after training, so that generation (a new graph for
every length on an XLA device) compiles nothing on the device and cannot touch the run's counts. On a TPU VM the
host's CPU generates a few dozen tokens of a 0.5-1B model in seconds.
"""

from pathlib import Path

import torch

from ..data.instruction_formats import MESSAGES, PROMPT_COMPLETION

PROMPT_WORDS = 8  # a plain text's prompt: its first words (at most half of them)
NEW_TOKENS = 16


def eval_prompts(data, tokenizer, count: int) -> list[str]:
    """The first `count` eval examples as prompts: an instruction's prompt (chat: the turns before the answer, ending
    where the assistant's turn starts), or the first words of a plain text."""
    rows = data.eval.select(range(min(count, len(data.eval))))
    if data.format == PROMPT_COMPLETION:
        return [str(row["prompt"]) for row in rows]
    if data.format == MESSAGES:
        return [
            tokenizer.apply_chat_template(_before_answer(row["messages"]), tokenize=False, add_generation_prompt=True)
            for row in rows
        ]
    prompts = []
    for row in rows:
        words = str(row[data.text_column]).split()
        prompts.append(" ".join(words[:max(1, min(PROMPT_WORDS, len(words) // 2))]))
    return prompts


def _before_answer(messages) -> list:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "assistant":
            return messages[:index]
    return messages


def load_for_generation(folder: Path):
    """The exported model on the CPU, in float32: a LoRA export (an adapter folder) through peft, else transformers."""
    folder = Path(folder)
    if (folder / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def continue_greedily(folder: Path, tokenizer, prompts: list[str], new_tokens: int = NEW_TOKENS,
                      counted: bool = False) -> list[dict]:
    """Each prompt and its greedy continuation (the decoded new tokens only), one prompt at a time (no padding);
    `counted`: with the number of new tokens before the end token ("new_tokens")."""
    return continue_with(load_for_generation(folder), tokenizer, prompts, new_tokens, counted)


def continue_with(model, tokenizer, prompts: list[str], new_tokens: int = NEW_TOKENS, counted: bool = False) -> list[dict]:
    """continue_greedily with a model already loaded (predict.py times the generation alone)."""
    samples = []
    with torch.no_grad():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
            if ids.shape[1] == 0:  # nothing to continue from: start from the end-of-text token
                ids = torch.tensor([[tokenizer.eos_token_id]])
            output = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, do_sample=False,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            )
            made = output[0, ids.shape[1]:].tolist()
            sample = {"prompt": prompt, "continuation": tokenizer.decode(made, skip_special_tokens=True)}
            if counted:  # generate() stops at the end token and keeps it
                sample["new_tokens"] = len(made) - (made[-1:] == [tokenizer.eos_token_id])
            samples.append(sample)
    return samples


def show(samples: list[dict]) -> str:
    return "\n".join(f"sample {index}: {sample['prompt']!r} -> {sample['continuation']!r}"
                     for index, sample in enumerate(samples, start=1))


def after_export(report: dict, tokenizer, data, config) -> str | None:
    """The task's step after the export: greedy samples from the exported model into the report, made on the host
    (generation compiles nothing on the device); what the run prints after its table (None: nothing to print)."""
    if not (config.export and config.samples):
        return None
    report["samples"] = continue_greedily(report["exported"], tokenizer, eval_prompts(data, tokenizer, config.samples))
    return show(report["samples"]) if report["samples"] else None
