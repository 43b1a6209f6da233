//! The AG-UI events the observer emits and their output encoding: `encode` writes the bytes of ag-ui's
//! `model_dump_json(by_alias=True, exclude_none=True)` (conversion-spec §1e.3, §1e.4): camelCase keys in class
//! declaration order (`type, timestamp, rawEvent, metadata, subagentRunId`, then the class's own fields), a field
//! left out when it is None.

use crate::json::write::{compact, compact_object, int, joined, string};
use crate::json::{Map, Value};

/// One AG-UI event: the fields every event class shares, and its own.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub timestamp: Option<i64>,
    pub raw_event: Option<Value>,
    pub metadata: Option<Map>,
    /// Written only for the classes that declare it (not the RUN_* events).
    pub subagent_run_id: Option<String>,
    pub body: Body,
}

/// The class of an event and its own fields, in declaration order.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    RunStarted {
        thread_id: String,
        run_id: String,
        protocol_version: Option<String>,
        parent_run_id: Option<String>,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        result: Option<Value>,
        outcome: Option<RunOutcome>,
        usage: Option<Vec<TokenUsage>>,
    },
    RunError {
        message: String,
        code: Option<String>,
        usage: Option<Vec<TokenUsage>>,
    },
    TextMessageStart {
        message_id: String,
        role: Option<String>,
        name: Option<String>,
    },
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    ReasoningMessageStart {
        message_id: String,
    },
    ReasoningMessageContent {
        message_id: String,
        delta: String,
    },
    ReasoningMessageEnd {
        message_id: String,
    },
    ReasoningEncryptedValue {
        subtype: String,
        entity_id: String,
        encrypted_value: String,
    },
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        parent_message_id: Option<String>,
    },
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: ToolContent,
        role: Option<String>,
    },
    Custom {
        name: String,
        value: Value,
    },
    SubagentStarted {
        name: String,
        description: Option<String>,
        parent_subagent_run_id: Option<String>,
        parent_tool_call_id: Option<String>,
        parent_message_id: Option<String>,
    },
    SubagentFinished {
        result: Option<Value>,
        outcome: Option<SubagentOutcome>,
    },
    SubagentError {
        message: String,
        code: Option<String>,
    },
}

/// A RUN_FINISHED outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    Success { pending_tool_call_ids: Option<Vec<String>> },
    Interrupt { interrupts: Vec<Interrupt> },
    Cancelled,
}

/// A SUBAGENT_FINISHED outcome.
#[derive(Clone, Debug, PartialEq)]
pub enum SubagentOutcome {
    Success,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenUsage {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub input_tokens: Option<Value>,
    pub output_tokens: Option<Value>,
    pub total_tokens: Option<Value>,
    pub reasoning_tokens: Option<Value>,
    pub cached_input_tokens: Option<Value>,
    pub cache_write_input_tokens: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Interrupt {
    pub subagent_run_id: Option<String>,
    pub id: String,
    pub reason: String,
    pub message: Option<String>,
    pub tool_call_id: Option<String>,
    pub response_schema: Option<Map>,
    pub expires_at: Option<String>,
    pub metadata: Option<Map>,
}

/// A TOOL_CALL_RESULT's content: text, or AG-UI content parts.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// An AG-UI input content part (`type`, `id`, then its own fields, then `metadata`).
#[derive(Clone, Debug, PartialEq)]
pub struct ContentPart {
    pub id: Option<String>,
    pub body: PartBody,
    pub metadata: Option<Value>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PartBody {
    Text { text: String },
    Image { source: Source },
    Audio { source: Source },
    Video { source: Source },
    Document { source: Source },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    Url { value: String, mime_type: Option<String> },
    File { value: String, provider: Option<String>, mime_type: Option<String> },
}

impl Body {
    /// The event's `type`, as written.
    pub fn type_name(&self) -> &'static str {
        match self {
            Body::RunStarted { .. } => "RUN_STARTED",
            Body::RunFinished { .. } => "RUN_FINISHED",
            Body::RunError { .. } => "RUN_ERROR",
            Body::TextMessageStart { .. } => "TEXT_MESSAGE_START",
            Body::TextMessageContent { .. } => "TEXT_MESSAGE_CONTENT",
            Body::TextMessageEnd { .. } => "TEXT_MESSAGE_END",
            Body::ReasoningMessageStart { .. } => "REASONING_MESSAGE_START",
            Body::ReasoningMessageContent { .. } => "REASONING_MESSAGE_CONTENT",
            Body::ReasoningMessageEnd { .. } => "REASONING_MESSAGE_END",
            Body::ReasoningEncryptedValue { .. } => "REASONING_ENCRYPTED_VALUE",
            Body::ToolCallStart { .. } => "TOOL_CALL_START",
            Body::ToolCallArgs { .. } => "TOOL_CALL_ARGS",
            Body::ToolCallEnd { .. } => "TOOL_CALL_END",
            Body::ToolCallResult { .. } => "TOOL_CALL_RESULT",
            Body::Custom { .. } => "CUSTOM",
            Body::SubagentStarted { .. } => "SUBAGENT_STARTED",
            Body::SubagentFinished { .. } => "SUBAGENT_FINISHED",
            Body::SubagentError { .. } => "SUBAGENT_ERROR",
        }
    }

    /// Whether the class declares `subagentRunId` (the RUN_* events do not).
    pub fn has_subagent_run_id(&self) -> bool {
        !matches!(self, Body::RunStarted { .. } | Body::RunFinished { .. } | Body::RunError { .. })
    }
}

impl Event {
    pub fn new(timestamp: i64, body: Body) -> Event {
        Event { timestamp: Some(timestamp), raw_event: None, metadata: None, subagent_run_id: None, body }
    }

    pub fn type_name(&self) -> &'static str {
        self.body.type_name()
    }

    /// The output record's value: the event's JSON.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        self.write(&mut out);
        out
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        w.str("type", self.type_name());
        w.opt_int("timestamp", self.timestamp);
        w.opt_value("rawEvent", self.raw_event.as_ref());
        if let Some(metadata) = &self.metadata {
            w.key("metadata");
            compact_object(w.out, metadata);
        }
        if self.body.has_subagent_run_id() {
            w.opt_str("subagentRunId", self.subagent_run_id.as_deref());
        }
        match &self.body {
            Body::RunStarted { thread_id, run_id, protocol_version, parent_run_id } => {
                w.str("threadId", thread_id);
                w.str("runId", run_id);
                w.opt_str("protocolVersion", protocol_version.as_deref());
                w.opt_str("parentRunId", parent_run_id.as_deref());
            }
            Body::RunFinished { thread_id, run_id, result, outcome, usage } => {
                w.str("threadId", thread_id);
                w.str("runId", run_id);
                w.opt_value("result", result.as_ref());
                if let Some(outcome) = outcome {
                    w.key("outcome");
                    outcome.write(w.out);
                }
                w.usage(usage.as_deref());
            }
            Body::RunError { message, code, usage } => {
                w.str("message", message);
                w.opt_str("code", code.as_deref());
                w.usage(usage.as_deref());
            }
            Body::TextMessageStart { message_id, role, name } => {
                w.str("messageId", message_id);
                w.opt_str("role", role.as_deref());
                w.opt_str("name", name.as_deref());
            }
            Body::TextMessageContent { message_id, delta } | Body::ReasoningMessageContent { message_id, delta } => {
                w.str("messageId", message_id);
                w.str("delta", delta);
            }
            Body::TextMessageEnd { message_id } | Body::ReasoningMessageEnd { message_id } => {
                w.str("messageId", message_id);
            }
            Body::ReasoningMessageStart { message_id } => {
                w.str("messageId", message_id);
                w.str("role", "reasoning");
            }
            Body::ReasoningEncryptedValue { subtype, entity_id, encrypted_value } => {
                w.str("subtype", subtype);
                w.str("entityId", entity_id);
                w.str("encryptedValue", encrypted_value);
            }
            Body::ToolCallStart { tool_call_id, tool_call_name, parent_message_id } => {
                w.str("toolCallId", tool_call_id);
                w.str("toolCallName", tool_call_name);
                w.opt_str("parentMessageId", parent_message_id.as_deref());
            }
            Body::ToolCallArgs { tool_call_id, delta } => {
                w.str("toolCallId", tool_call_id);
                w.str("delta", delta);
            }
            Body::ToolCallEnd { tool_call_id } => w.str("toolCallId", tool_call_id),
            Body::ToolCallResult { message_id, tool_call_id, content, role } => {
                w.str("messageId", message_id);
                w.str("toolCallId", tool_call_id);
                w.key("content");
                content.write(w.out);
                w.opt_str("role", role.as_deref());
            }
            Body::Custom { name, value } => {
                w.str("name", name);
                w.opt_value("value", Some(value));
            }
            Body::SubagentStarted {
                name,
                description,
                parent_subagent_run_id,
                parent_tool_call_id,
                parent_message_id,
            } => {
                w.str("name", name);
                w.opt_str("description", description.as_deref());
                w.opt_str("parentSubagentRunId", parent_subagent_run_id.as_deref());
                w.opt_str("parentToolCallId", parent_tool_call_id.as_deref());
                w.opt_str("parentMessageId", parent_message_id.as_deref());
            }
            Body::SubagentFinished { result, outcome } => {
                w.opt_value("result", result.as_ref());
                if let Some(SubagentOutcome::Success) = outcome {
                    w.key("outcome");
                    w.out.extend_from_slice(b"{\"type\":\"success\"}");
                }
            }
            Body::SubagentError { message, code } => {
                w.str("message", message);
                w.opt_str("code", code.as_deref());
            }
        }
        w.close();
    }
}

impl RunOutcome {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        match self {
            RunOutcome::Success { pending_tool_call_ids } => {
                w.str("type", "success");
                if let Some(ids) = pending_tool_call_ids {
                    w.key("pendingToolCallIds");
                    joined(w.out, *b"[]", b",", ids, |out, id| string(out, id));
                }
            }
            RunOutcome::Interrupt { interrupts } => {
                w.str("type", "interrupt");
                w.key("interrupts");
                joined(w.out, *b"[]", b",", interrupts, |out, interrupt| interrupt.write(out));
            }
            RunOutcome::Cancelled => w.str("type", "cancelled"),
        }
        w.close();
    }
}

impl Interrupt {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        w.opt_str("subagentRunId", self.subagent_run_id.as_deref());
        w.str("id", &self.id);
        w.str("reason", &self.reason);
        w.opt_str("message", self.message.as_deref());
        w.opt_str("toolCallId", self.tool_call_id.as_deref());
        w.opt_map("responseSchema", self.response_schema.as_ref());
        w.opt_str("expiresAt", self.expires_at.as_deref());
        w.opt_map("metadata", self.metadata.as_ref());
        w.close();
    }
}

impl TokenUsage {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        w.opt_str("provider", self.provider.as_deref());
        w.opt_str("model", self.model.as_deref());
        w.opt_value("inputTokens", self.input_tokens.as_ref());
        w.opt_value("outputTokens", self.output_tokens.as_ref());
        w.opt_value("totalTokens", self.total_tokens.as_ref());
        w.opt_value("reasoningTokens", self.reasoning_tokens.as_ref());
        w.opt_value("cachedInputTokens", self.cached_input_tokens.as_ref());
        w.opt_value("cacheWriteInputTokens", self.cache_write_input_tokens.as_ref());
        w.close();
    }
}

impl ToolContent {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            ToolContent::Text(text) => string(out, text),
            ToolContent::Parts(parts) => joined(out, *b"[]", b",", parts, |out, part| part.write(out)),
        }
    }
}

impl ContentPart {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        let (kind, source) = match &self.body {
            PartBody::Text { .. } => ("text", None),
            PartBody::Image { source } => ("image", Some(source)),
            PartBody::Audio { source } => ("audio", Some(source)),
            PartBody::Video { source } => ("video", Some(source)),
            PartBody::Document { source } => ("document", Some(source)),
        };
        w.str("type", kind);
        w.opt_str("id", self.id.as_deref());
        if let PartBody::Text { text } = &self.body {
            w.str("text", text);
        }
        if let Some(source) = source {
            w.key("source");
            source.write(w.out);
        }
        w.opt_value("metadata", self.metadata.as_ref());
        w.close();
    }
}

impl ContentPart {
    /// The part's JSON object as written (None fields left out).
    pub fn to_value(&self) -> Value {
        let mut out = Vec::new();
        self.write(&mut out);
        crate::json::parse::parse(&out).unwrap_or(Value::Null)
    }
}

impl Source {
    fn write(&self, out: &mut Vec<u8>) {
        let mut w = Fields::open(out);
        match self {
            Source::Url { value, mime_type } => {
                w.str("type", "url");
                w.str("value", value);
                w.opt_str("mimeType", mime_type.as_deref());
            }
            Source::File { value, provider, mime_type } => {
                w.str("type", "file");
                w.str("value", value);
                w.opt_str("provider", provider.as_deref());
                w.opt_str("mimeType", mime_type.as_deref());
            }
        }
        w.close();
    }
}

/// Writes one JSON object's members in order, commas between them.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Fields<'a> {
    fn open(out: &'a mut Vec<u8>) -> Fields<'a> {
        out.push(b'{');
        Fields { out, first: true }
    }

    fn key(&mut self, name: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn str(&mut self, name: &str, value: &str) {
        self.key(name);
        string(self.out, value);
    }

    fn opt_str(&mut self, name: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.str(name, value);
        }
    }

    fn opt_int(&mut self, name: &str, value: Option<i64>) {
        if let Some(value) = value {
            self.key(name);
            int(self.out, value);
        }
    }

    fn opt_value(&mut self, name: &str, value: Option<&Value>) {
        if let Some(value) = value {
            self.key(name);
            compact(self.out, value);
        }
    }

    fn opt_map(&mut self, name: &str, value: Option<&Map>) {
        if let Some(value) = value {
            self.key(name);
            compact_object(self.out, value);
        }
    }

    fn usage(&mut self, usage: Option<&[TokenUsage]>) {
        if let Some(usage) = usage {
            self.key("usage");
            joined(self.out, *b"[]", b",", usage, |out, entry| entry.write(out));
        }
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_class_declaration_order() {
        let mut event = Event::new(
            1748779200800,
            Body::RunFinished {
                thread_id: "thread_ex1".into(),
                run_id: "run-ex1".into(),
                result: Some(Value::str("Hello there")),
                outcome: Some(RunOutcome::Success { pending_tool_call_ids: None }),
                usage: None,
            },
        );
        let mut raw = Map::new();
        raw.push("status", Value::str("completed"));
        event.raw_event = Some(Value::Object(raw));
        event.subagent_run_id = Some("ignored: RUN_FINISHED has no such field".into());
        assert_eq!(
            String::from_utf8(event.encode()).unwrap(),
            "{\"type\":\"RUN_FINISHED\",\"timestamp\":1748779200800,\"rawEvent\":{\"status\":\"completed\"},\
             \"threadId\":\"thread_ex1\",\"runId\":\"run-ex1\",\"result\":\"Hello there\",\"outcome\":{\"type\":\"success\"}}"
        );
    }
}
