//! The object keys the source items, AG-UI events and display items use, held as static text: a key read from JSON
//! that is one of them is not allocated.

use super::Key;
use std::borrow::Cow;

/// The names a parsed key is looked up among (any other key is owned).
const KNOWN: [&str; 124] = [
    // Source items (the wire's items and their pydantic-ai events).
    "run_id",
    "thread_id",
    "sequence",
    "occurred_at",
    "event",
    "event_kind",
    "provider_name",
    "provider_details",
    "index",
    "delta",
    "part_delta_kind",
    "tool_call_id",
    "part_kind",
    "part",
    "kind",
    "id",
    "content_delta",
    "tool_name",
    "content",
    "payload",
    "schema_version",
    "type",
    "tool_name_delta",
    "args_delta",
    "tool_kind",
    "args",
    "citations_delta",
    "request_index",
    "previous_part_kind",
    "request_id",
    "signature_delta",
    "next_part_kind",
    "metadata",
    "citations",
    "message_count",
    "signature",
    "status",
    "timestamp",
    "outcome",
    "input_tokens",
    "args_valid",
    "retry",
    "output_tokens",
    "output",
    "details",
    "capability_id",
    "result",
    "usage",
    "cache_write_tokens",
    "cache_read_tokens",
    "input_audio_tokens",
    "cache_audio_read_tokens",
    "output_audio_tokens",
    "audio_seconds",
    "cost",
    "requests",
    "tool_calls",
    "provider_receipts",
    "unknown_cost_records",
    "incomplete_requests",
    "model_usage_coverage",
    "failure",
    "suspend_reason",
    "deferred",
    "source",
    "subagent",
    "input_id",
    "display",
    "source_id",
    "media",
    "invocation_id",
    "action",
    "child_instance_id",
    "parent_run_id",
    "parent_agent_instance_id",
    "parent_tool_call_id",
    "child_run_id",
    "request_tokens",
    "reasoning_tokens",
    "reason",
    "media_type",
    "chunk_index",
    "chunk_count",
    "name",
    "text",
    "results",
    "tool_id",
    "value",
    "url",
    "code",
    "message",
    "message_id",
    "model",
    "parts",
    "summary",
    "state",
    // AG-UI events.
    "rawEvent",
    "subagentRunId",
    "threadId",
    "runId",
    "parentRunId",
    "protocolVersion",
    "messageId",
    "role",
    "toolCallId",
    "toolCallName",
    "parentMessageId",
    "entityId",
    "subtype",
    "encryptedValue",
    "description",
    "parentSubagentRunId",
    "parentToolCallId",
    "error",
    "input",
    // Display items' content.
    "responseGroup",
    "arguments",
    "arguments_complete",
    "memory_sources",
    "encrypted_value",
    "result_parts",
    "truncated",
    "omitted",
    "applied_edit",
];

const SLOTS: usize = 512;

/// Where a name's probing starts: its length and three of its bytes, mixed.
const fn slot(name: &[u8]) -> usize {
    let len = name.len();
    if len == 0 {
        return 0;
    }
    let mixed = len.wrapping_mul(0x9e37)
        ^ (name[0] as usize).wrapping_mul(0x85eb)
        ^ (name[len - 1] as usize).wrapping_mul(0xc2b3)
        ^ (name[len / 2] as usize).wrapping_mul(0x27d5);
    (mixed ^ (mixed >> 9)) % SLOTS
}

const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// KNOWN by `slot`, probing linearly; "" marks an empty slot.
const TABLE: [&str; SLOTS] = {
    let mut table = [""; SLOTS];
    let mut n = 0;
    while n < KNOWN.len() {
        let name = KNOWN[n];
        let mut at = slot(name.as_bytes());
        loop {
            if table[at].is_empty() {
                table[at] = name;
                break;
            }
            assert!(!same(table[at].as_bytes(), name.as_bytes()), "a name listed twice");
            at = (at + 1) % SLOTS;
        }
        n += 1;
    }
    table
};

/// `text` as an object key: static when it is a known name, an owned copy otherwise.
pub fn key(text: &str) -> Key {
    let mut at = slot(text.as_bytes());
    loop {
        let found = TABLE[at];
        if found.is_empty() {
            return Cow::Owned(text.to_owned());
        }
        if found == text {
            return Cow::Borrowed(found);
        }
        at = (at + 1) % SLOTS;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_names_are_static_and_others_owned() {
        for name in KNOWN {
            assert!(matches!(key(name), Cow::Borrowed(found) if found == name), "{name}");
        }
        for other in ["", "x", "runId2", "type ", "Type", "rawevent", "a13n.harness.client-tool"] {
            assert!(matches!(key(other), Cow::Owned(found) if found == other), "{other}");
        }
    }
}
