//! Tool-result projection (conversion-spec §1b.4): execution values become text, or payload-free AG-UI content
//! parts when they hold native media.

use crate::agui::{ContentPart, PartBody, Source, ToolContent};
use crate::json::write::{python_default, sorted_text, written};
use crate::json::{Map, Value};
use crate::wire::media::{binary_size, is_media};
use crate::wire::{Body as ItemBody, Inner, Item};

const CONTENT_KEY: &str = "a13n.tool-content";

/// Python's `sequence[index]` for an index within `-len..len` (the decoder checked it).
fn python_index(items: &[Value], index: i64) -> Option<&Value> {
    let len = items.len() as i64;
    let at = if index < 0 { len + index } else { index };
    usize::try_from(at).ok().and_then(|at| items.get(at))
}

/// The tool's own result: `content[result_index]` when the Harness marked one, else the content.
pub fn execution_value<'a>(content: &'a Value, metadata: &Value) -> &'a Value {
    let marker = metadata.as_object().and_then(|m| m.get(CONTENT_KEY));
    let index = marker.and_then(Value::as_object).and_then(|m| m.get("result_index"));
    match (index, content) {
        (Some(Value::Int(i)), Value::Array(items)) => python_index(items, *i).unwrap_or(content),
        _ => content,
    }
}

/// The payload-free description of a value pydantic-ai reads as native media, else None.
pub fn media_description(value: &Value) -> Option<Map> {
    if !is_media(value) {
        return None;
    }
    let map = value.as_object()?;
    let kind = map.get("kind")?.as_str()?;
    let get = |key: &str| map.get(key).cloned().unwrap_or(Value::Null);
    let mut out = Map::with_capacity(4);
    match kind {
        "binary" => {
            out.push("kind", Value::str("binary"));
            out.push("media_type", get("media_type"));
            out.push("size_bytes", Value::Int(map.get("data").and_then(binary_size).unwrap_or(0) as i64));
            out.push("payload_omitted", Value::Bool(true));
        }
        "uploaded-file" => {
            out.push("kind", Value::str(kind));
            out.push("file_id", get("file_id"));
            out.push("provider_name", get("provider_name"));
            out.push("media_type", map.get("media_type").cloned().unwrap_or(Value::str("application/octet-stream")));
        }
        _ => {
            out.push("kind", Value::str(kind));
            let url = map.get("url").and_then(Value::as_str).unwrap_or_default();
            if url.starts_with("https://") || url.starts_with("http://") {
                out.push("url", Value::str(url));
            } else {
                out.push("payload_omitted", Value::Bool(true));
            }
            out.push("media_type", get("media_type"));
        }
    }
    Some(out)
}

/// `value` with native media, at any depth of objects and arrays, replaced by its description.
pub fn public_value(value: &Value) -> Value {
    match value {
        Value::Object(map) => match media_description(value) {
            Some(described) => Value::Object(described),
            None => Value::Object(Map::from_entries(
                map.entries().iter().map(|(k, v)| (k.clone(), public_value(v))).collect(),
            )),
        },
        Value::Array(items) => Value::Array(items.iter().map(public_value).collect()),
        other => other.clone(),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::Str(s) => s.clone(),
        other => sorted_text(&public_value(other)),
    }
}

fn part(description: &Map) -> ContentPart {
    let mime = description.get("media_type").and_then(Value::as_str).map(str::to_owned);
    let source = if let Some(url) = description.get("url").and_then(Value::as_str) {
        Source::Url { value: url.to_owned(), mime_type: mime.clone() }
    } else if let Some(file_id) = description.get("file_id").and_then(Value::as_str) {
        let provider = description.get("provider_name").and_then(Value::as_str).map(str::to_owned);
        Source::File { value: file_id.to_owned(), provider, mime_type: mime.clone() }
    } else {
        let body = PartBody::Text { text: text(&Value::Object(description.clone())) };
        return ContentPart { id: None, body, metadata: None };
    };
    let kind = description.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mime_text = mime.as_deref().unwrap_or_default();
    let body = if kind == "image-url" || mime_text.starts_with("image/") {
        PartBody::Image { source }
    } else if kind == "audio-url" || mime_text.starts_with("audio/") {
        PartBody::Audio { source }
    } else if kind == "video-url" || mime_text.starts_with("video/") {
        PartBody::Video { source }
    } else {
        PartBody::Document { source }
    };
    ContentPart { id: None, body, metadata: None }
}

/// Text for ordinary results; ordered AG-UI content parts when any item is native media.
pub fn tool_result_content(value: &Value) -> ToolContent {
    let single = [value.clone()];
    let items: &[Value] = match value {
        Value::Array(items) => items,
        _ => &single,
    };
    let descriptions: Vec<Option<Map>> = items.iter().map(media_description).collect();
    if descriptions.iter().all(Option::is_none) {
        return ToolContent::Text(text(value));
    }
    ToolContent::Parts(
        items
            .iter()
            .zip(descriptions)
            .map(|(item, described)| match described {
                None => ContentPart { id: None, body: PartBody::Text { text: text(item) }, metadata: None },
                Some(described) => part(&described),
            })
            .collect(),
    )
}

/// Characters of the tool's answer a failure message keeps.
pub const MAX_FAILURE_CHARS: usize = 4096;

/// A failure message: the text, or `json.dumps` of the content parts' JSON objects, cut to 4,096 characters.
fn failure_message(content: &ToolContent) -> String {
    let text = match content {
        ToolContent::Text(text) => text.clone(),
        ToolContent::Parts(parts) => {
            let mut out = Vec::new();
            python_default(&mut out, &Value::Array(parts.iter().map(ContentPart::to_value).collect()));
            written(&out)
        }
    };
    text.chars().take(MAX_FAILURE_CHARS).collect()
}

/// (tool call id, failure message, run id) of a tool result item the observer does not present (a non-success
/// outcome, or a part that is no tool return), as the display records it; None for any other item.
pub fn failed_tool_call(item: &Item) -> Option<(String, String, String)> {
    let ItemBody::Event(Inner::Agent { event_kind, data }) = &item.body else { return None };
    if event_kind != "function_tool_result" && event_kind != "output_tool_result" {
        return None;
    }
    let part = data.as_object()?.get("part")?.as_object()?;
    let returned = part.get("part_kind").and_then(Value::as_str) == Some("tool-return");
    if returned && part.get("outcome").and_then(Value::as_str) == Some("success") {
        return None;
    }
    let call_id = part.get("tool_call_id")?.as_str()?.to_owned();
    let null = Value::Null;
    let content = part.get("content").unwrap_or(&null);
    let content = if returned {
        tool_result_content(execution_value(content, part.get("metadata").unwrap_or(&null)))
    } else {
        tool_result_content(content)
    };
    Some((call_id, failure_message(&content), item.run_id.clone()))
}
