"""The node benchmark's workload: multi-turn conversations over a shared long prefix.

Every conversation starts with one of `documents` shared prefixes (a "system prompt /
document" of `prefix_tokens` tokens, conversation i reads document i % documents), then its
first user message (`first_user_tokens`). Each later turn appends the previous answer (the
tokens the server generated) and a new user message (`user_tokens`), so turn t's prompt is

    document + user_1 + answer_1 + ... + answer_{t-1} + user_t

Token ids are drawn from a seeded generator (string seeds: the same ids in every process,
whatever PYTHONHASHSEED), so a seed names the whole workload; a routing mode takes a seed of
its own and its conversations share nothing with another mode's.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import List


@dataclass(frozen=True)
class WorkloadSpec:
    conversations: int
    turns: int
    prefix_tokens: int
    documents: int
    first_user_tokens: int
    user_tokens: int
    max_tokens: int
    vocab: int

    def validate(self) -> None:
        """ValueError naming the first bad size."""
        for name in ("conversations", "turns", "documents", "first_user_tokens", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("prefix_tokens", "user_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.turns > 1 and self.user_tokens < 1:
            raise ValueError("user_tokens must be >= 1 when turns > 1")
        if self.vocab < 16:
            raise ValueError(f"vocab must be >= 16, got {self.vocab}")

    def last_prompt_tokens(self) -> int:
        """Prompt tokens of a conversation's last turn (every answer at max_tokens)."""
        return (self.prefix_tokens + self.first_user_tokens
                + (self.turns - 1) * (self.max_tokens + self.user_tokens))

    def prompt_tokens_total(self) -> int:
        """Prompt tokens of the whole workload (every answer at max_tokens)."""
        per_conv = sum(self.prefix_tokens + self.first_user_tokens
                       + t * (self.max_tokens + self.user_tokens) for t in range(self.turns))
        return per_conv * self.conversations

    def unique_tokens(self) -> int:
        """Distinct context tokens of the workload: what a cache would hold for all of it."""
        per_conv = self.last_prompt_tokens() - self.prefix_tokens + self.max_tokens
        return self.prefix_tokens * min(self.documents, self.conversations) \
            + per_conv * self.conversations


def tokens(seed: str, n: int, vocab: int) -> List[int]:
    """n reproducible token ids named by `seed`, clear of the low ids (special tokens)."""
    rng = random.Random(seed)
    lo = min(1000, vocab // 4)
    return [rng.randrange(lo, vocab - 1) for _ in range(n)]


@dataclass
class Conversation:
    """One conversation: its id, its document and user messages, the answers so far."""
    conv_id: str
    index: int
    document: List[int]
    user_messages: List[List[int]]
    answers: List[List[int]] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.user_messages)

    @property
    def next_turn(self) -> int:
        """1-based number of the turn to send next (turns + 1 once done)."""
        return len(self.answers) + 1

    @property
    def done(self) -> bool:
        return len(self.answers) >= self.turns

    def prompt(self) -> List[int]:
        """The next turn's prompt: the document and the whole history so far."""
        out = list(self.document)
        for user, answer in zip(self.user_messages, self.answers):
            out += user + answer
        return out + self.user_messages[len(self.answers)]

    def add_answer(self, answer: List[int]) -> None:
        if self.done:
            raise RuntimeError(f"{self.conv_id}: answer beyond its {self.turns} turns")
        self.answers.append(list(answer))


def make_conversations(spec: WorkloadSpec, seed: int) -> List[Conversation]:
    """The workload of one routing mode: spec.conversations fresh conversations."""
    spec.validate()
    docs = [tokens(f"{seed}/doc/{d}", spec.prefix_tokens, spec.vocab)
            for d in range(min(spec.documents, spec.conversations))]
    convs = []
    for i in range(spec.conversations):
        users = [tokens(f"{seed}/conv/{i}/user/{t}",
                        spec.first_user_tokens if t == 1 else spec.user_tokens, spec.vocab)
                 for t in range(1, spec.turns + 1)]
        convs.append(Conversation(f"s{seed}-c{i}", i, docs[i % len(docs)], users))
    return convs
