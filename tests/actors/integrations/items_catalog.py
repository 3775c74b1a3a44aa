"""Responses API input items of every type, shaped as the SDK hands them to a session.

Shared by the mapping tests (no SDK needed) and the `AgentsSession` tests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CALL_TYPES", "ITEMS", "orphan_outputs", "tool_run_items"]

IMAGE = "data:image/png;base64,iVBORw0KGgo="

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "Hello"},
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Answer in Norwegian."},
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "what is in this picture?"},
            {"type": "input_image", "image_url": IMAGE, "detail": "auto"},
            {"type": "input_file", "file_id": "file_1", "filename": "a.pdf"},
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "encrypted_content": "gAAAA==",
        "summary": [{"type": "summary_text", "text": "look up the weather"}],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "weather",
        "arguments": '{"city":"Oslo"}',
        "status": "completed",
    },
    {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_2",
        "name": "weather",
        "arguments": '{"city":"Bergen"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "12 C"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [
            {"type": "input_text", "text": "rain"},
            {"type": "input_image", "image_url": IMAGE},
        ],
    },
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [
            {
                "type": "output_text",
                "text": "12 C in Oslo, rain in Bergen.",
                "logprobs": [],
                "annotations": [
                    {
                        "type": "url_citation",
                        "url": "https://example.org",
                        "title": "t",
                        "start_index": 0,
                        "end_index": 4,
                    }
                ],
            },
            {"type": "refusal", "refusal": "no forecast beyond today"},
        ],
    },
    {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_3", "name": "grep", "input": "TODO"},
    {"type": "custom_tool_call_output", "call_id": "call_3", "output": "3 matches"},
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_4",
        "status": "completed",
        "action": {"type": "click", "button": "left", "x": 10, "y": 20},
        "pending_safety_checks": [],
    },
    {
        "type": "computer_call_output",
        "call_id": "call_4",
        "output": {"type": "computer_screenshot", "image_url": IMAGE},
    },
    {
        "type": "shell_call",
        "id": "sh_1",
        "call_id": "call_5",
        "status": "completed",
        "action": {"commands": ["ls"], "timeout_ms": 1000},
    },
    {
        "type": "shell_call_output",
        "call_id": "call_5",
        "output": [{"stdout": "a\nb\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
    },
    {
        "type": "apply_patch_call",
        "id": "ap_1",
        "call_id": "call_6",
        "status": "completed",
        "operation": {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n"},
    },
    {"type": "apply_patch_call_output", "call_id": "call_6", "status": "completed", "output": "ok"},
    {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_7",
        "status": "completed",
        "action": {"type": "exec", "command": ["pwd"], "env": {}},
    },
    {"type": "local_shell_call_output", "id": "ls_1", "call_id": "call_7", "output": "/tmp"},
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "weather oslo"},
    },
    {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"], "results": None},
    {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "iVBOR="},
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "status": "completed",
        "code": "1+1",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "2"}],
    },
    {"type": "mcp_list_tools", "id": "ml_1", "server_label": "s", "tools": []},
    {"type": "mcp_approval_request", "id": "mr_1", "server_label": "s", "name": "rm", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": False, "reason": "no"},
    {"type": "mcp_call", "id": "mc_1", "server_label": "s", "name": "echo", "arguments": "{}", "output": "hi"},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAB=="},
    {"type": "item_reference", "id": "msg_0"},
    {"role": "user", "content": "こんにちは 😊 Robert'); DROP TABLE students;--"},
    {"role": "assistant", "content": "Hi there!"},
]

#: Call types that need their output in the same request (paired by call_id).
CALL_TYPES = {
    "function_call",
    "custom_tool_call",
    "computer_call",
    "shell_call",
    "apply_patch_call",
    "local_shell_call",
    "tool_search_call",
    "program",
}


def orphan_outputs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Outputs (``*_output`` with a call_id) with no call of that id before them."""
    seen: set[str] = set()
    orphans = []
    for item in items:
        kind = item.get("type")
        if kind in CALL_TYPES:
            seen.add(item.get("call_id"))
        elif isinstance(kind, str) and kind.endswith("_output") and item.get("call_id") not in seen:
            orphans.append(item)
    return orphans


def tool_run_items(turn: int) -> list[dict[str, Any]]:
    """One agent turn with a reasoning item, a function call and its output."""
    return [
        {"role": "user", "content": f"question {turn}"},
        {"type": "reasoning", "id": f"rs_{turn}", "summary": []},
        {"type": "function_call", "call_id": f"t{turn}", "name": "lookup", "arguments": f'{{"n":{turn}}}'},
        {"type": "function_call_output", "call_id": f"t{turn}", "output": f"result {turn} " * 8},
        {"role": "assistant", "content": f"answer {turn}"},
    ]
