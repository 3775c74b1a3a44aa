"""One compaction attempt and its parts: the attempt's state machine, the decision
(who ends it), the lease keeper, the policy and the role-alternation rules."""

from ._policy import CompactionPolicy, OnBusy, TokenCounter, bind_compressor, estimate_tokens

__all__ = ["CompactionPolicy", "OnBusy", "TokenCounter", "bind_compressor", "estimate_tokens"]
