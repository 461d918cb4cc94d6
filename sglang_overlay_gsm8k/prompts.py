"""Few-shot GSM8K prompts in the format SGLang's own check uses.

Completions: k worked examples ``"Question: ...\\nAnswer: ...\\n\\n"`` then
``"Question: <q>\\nAnswer:"``, stopped before the model starts the next
"Question:" (as ``sglang.test.few_shot_gsm8k`` does, but with the shots drawn from
the train split so no test question is shown to the model). Chat: the same shots
as user/assistant turns, the question as the last user turn.

Invariants: no test question appears in the shots; the prefix is built once per run
and shared by every completion prompt. Cost: string concatenation; standard library only.
"""

from __future__ import annotations

from sglang_overlay_gsm8k.data import Problem

STOP = ["Question:", "Assistant:", "<|separator|>"]


def question_block(question: str) -> str:
    return f"Question: {question}\nAnswer:"


def few_shot_prefix(shots: list[Problem]) -> str:
    return "".join(f"{question_block(s.question)} {s.answer}\n\n" for s in shots)


def completion_prompt(prefix: str, problem: Problem) -> str:
    """``prefix`` is ``few_shot_prefix(shots)``, built once per run."""
    return prefix + question_block(problem.question)


def chat_messages(shots: list[Problem], problem: Problem, system: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": system}] if system else []
    for s in shots:
        messages.append({"role": "user", "content": f"Question: {s.question}"})
        messages.append({"role": "assistant", "content": s.answer})
    messages.append({"role": "user", "content": f"Question: {problem.question}"})
    return messages
