"""CPU per item of what `AgentsSession.add_items` does before the write, and the JSON depth bound.

For a few typical Responses API items (a function call, its output, an assistant
message with output text parts, a reasoning item, a plain user text): the
conversion to a `Message` (`item_to_message`) plus the store's column values
(`message_params`), single-threaded, best of several repeats. Then the check that
bounds JSON nesting, side by side on the same values: the Python walk before the
encoder (`check_json_value`, how every content list and meta was checked before)
vs the encoder first with the bracket count (`encode_json_bounded`, the walk only
past 64 opening brackets).

    python -m tests.benchmarks.bench_items

Not collected by pytest.
"""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable
from typing import Any

from persistence._rows import message_params
from protocol._checks import check_json_value, encode_json_bounded
from protocol._response_items import item_to_message

ITEMS: dict[str, dict[str, Any]] = {
    "function_call": {
        "type": "function_call",
        "call_id": "call_abc123",
        "name": "get_weather",
        "arguments": '{"city": "Paris", "unit": "c"}',
        "id": "fc_1",
        "status": "completed",
    },
    "function_call_output": {
        "type": "function_call_output",
        "call_id": "call_abc123",
        "output": '{"temp": 21, "sky": "clear"}',
    },
    "assistant message": {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is 21C and clear in Paris. " * 4, "annotations": []}],
    },
    "reasoning": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look it up."}]},
    "plain user text": {"role": "user", "content": "What is the weather in Paris today? " * 3},
}
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def best_us(call: Callable[[], object], number: int = 20_000, repeat: int = 7) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def walked_then_encoded(value: Any) -> str:
    check_json_value(value, "meta")
    return _ENCODER.encode(value)


def main() -> None:
    print("us per item: item_to_message + message_params (what add_items does before the write)")
    for name, item in ITEMS.items():
        print(f"  {name:<22} {best_us(lambda item=item: message_params(item_to_message(item), None)):6.2f}")
    print("us per value: the JSON depth bound, walk first vs encoder first (same value, same encoder)")
    for name, item in ITEMS.items():
        meta = {"agents_item": item}
        walk = best_us(lambda meta=meta: walked_then_encoded(meta))
        bounded = best_us(lambda meta=meta: encode_json_bounded(_ENCODER.encode, meta, "meta"))
        print(f"  {name:<22} walk {walk:5.2f}  encoder first {bounded:5.2f}  ({bounded / walk:.2f})")


if __name__ == "__main__":
    main()
