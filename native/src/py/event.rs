//! An ag-ui event object (a pydantic model of `ag_ui.core`) read into an `Event`, field by field; TypeError for
//! what these types do not hold (extra fields, a data source part, values that are not JSON data), which the
//! caller leaves to the Python encoder.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::value::to_value;
use crate::agui::{
    Body, ContentPart, Event, Interrupt, PartBody, RunOutcome, Source, SubagentOutcome, TokenUsage, ToolContent,
};
use crate::json::{Map, Value};

fn attr<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    obj.getattr(PyString::intern(obj.py(), name))
}

fn text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    let value = attr(obj, name)?;
    let value = value.cast::<PyString>().map_err(|_| PyTypeError::new_err(format!("{name} is not a str")))?;
    Ok(value.to_str()?.to_owned())
}

fn opt_text(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<String>> {
    let value = attr(obj, name)?;
    if value.is_none() {
        return Ok(None);
    }
    let value = value.cast::<PyString>().map_err(|_| PyTypeError::new_err(format!("{name} is not a str")))?;
    Ok(Some(value.to_str()?.to_owned()))
}

fn opt_value(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<Value>> {
    let value = attr(obj, name)?;
    if value.is_none() {
        return Ok(None);
    }
    to_value(&value).map(Some)
}

fn opt_map(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<Map>> {
    match opt_value(obj, name)? {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(PyTypeError::new_err(format!("{name} is not a dict"))),
    }
}

fn opt_int(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<i64>> {
    let value = attr(obj, name)?;
    if value.is_none() {
        return Ok(None);
    }
    value.extract::<i64>().map(Some)
}

/// Models with extra fields are written by pydantic alone.
fn no_extra(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let extra = attr(obj, "__pydantic_extra__")?;
    if let Ok(extra) = extra.cast::<PyDict>() {
        if !extra.is_empty() {
            return Err(PyTypeError::new_err("a model with extra fields"));
        }
    }
    Ok(())
}

fn usage(obj: &Bound<'_, PyAny>) -> PyResult<Option<Vec<TokenUsage>>> {
    let value = attr(obj, "usage")?;
    if value.is_none() {
        return Ok(None);
    }
    let list = value.cast::<PyList>().map_err(|_| PyTypeError::new_err("usage is not a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for entry in list.iter() {
        no_extra(&entry)?;
        out.push(TokenUsage {
            provider: opt_text(&entry, "provider")?,
            model: opt_text(&entry, "model")?,
            input_tokens: opt_value(&entry, "input_tokens")?,
            output_tokens: opt_value(&entry, "output_tokens")?,
            total_tokens: opt_value(&entry, "total_tokens")?,
            reasoning_tokens: opt_value(&entry, "reasoning_tokens")?,
            cached_input_tokens: opt_value(&entry, "cached_input_tokens")?,
            cache_write_input_tokens: opt_value(&entry, "cache_write_input_tokens")?,
        });
    }
    Ok(Some(out))
}

fn run_outcome(obj: &Bound<'_, PyAny>) -> PyResult<Option<RunOutcome>> {
    let outcome = attr(obj, "outcome")?;
    if outcome.is_none() {
        return Ok(None);
    }
    no_extra(&outcome)?;
    Ok(Some(match text(&outcome, "type")?.as_str() {
        "success" => {
            let ids = attr(&outcome, "pending_tool_call_ids")?;
            let pending_tool_call_ids = if ids.is_none() { None } else { Some(ids.extract::<Vec<String>>()?) };
            RunOutcome::Success { pending_tool_call_ids }
        }
        "interrupt" => {
            let list = attr(&outcome, "interrupts")?;
            let list = list.cast::<PyList>().map_err(|_| PyTypeError::new_err("interrupts is not a list"))?;
            let mut interrupts = Vec::with_capacity(list.len());
            for entry in list.iter() {
                no_extra(&entry)?;
                interrupts.push(Interrupt {
                    subagent_run_id: opt_text(&entry, "subagent_run_id")?,
                    id: text(&entry, "id")?,
                    reason: text(&entry, "reason")?,
                    message: opt_text(&entry, "message")?,
                    tool_call_id: opt_text(&entry, "tool_call_id")?,
                    response_schema: opt_map(&entry, "response_schema")?,
                    expires_at: opt_text(&entry, "expires_at")?,
                    metadata: opt_map(&entry, "metadata")?,
                });
            }
            RunOutcome::Interrupt { interrupts }
        }
        "cancelled" => RunOutcome::Cancelled,
        other => return Err(PyTypeError::new_err(format!("unknown run outcome {other:?}"))),
    }))
}

fn source(part: &Bound<'_, PyAny>) -> PyResult<Source> {
    let source = attr(part, "source")?;
    no_extra(&source)?;
    match text(&source, "type")?.as_str() {
        "url" => Ok(Source::Url { value: text(&source, "value")?, mime_type: opt_text(&source, "mime_type")? }),
        "file" => Ok(Source::File {
            value: text(&source, "value")?,
            provider: opt_text(&source, "provider")?,
            mime_type: opt_text(&source, "mime_type")?,
        }),
        other => Err(PyTypeError::new_err(format!("a {other} source"))),
    }
}

fn tool_content(obj: &Bound<'_, PyAny>) -> PyResult<ToolContent> {
    let content = attr(obj, "content")?;
    if let Ok(content) = content.cast::<PyString>() {
        return Ok(ToolContent::Text(content.to_str()?.to_owned()));
    }
    let list = content.cast::<PyList>().map_err(|_| PyTypeError::new_err("content is neither str nor list"))?;
    let mut parts = Vec::with_capacity(list.len());
    for part in list.iter() {
        no_extra(&part)?;
        let body = match text(&part, "type")?.as_str() {
            "text" => PartBody::Text { text: text(&part, "text")? },
            "image" => PartBody::Image { source: source(&part)? },
            "audio" => PartBody::Audio { source: source(&part)? },
            "video" => PartBody::Video { source: source(&part)? },
            "document" => PartBody::Document { source: source(&part)? },
            other => return Err(PyTypeError::new_err(format!("a {other} content part"))),
        };
        parts.push(ContentPart { id: opt_text(&part, "id")?, body, metadata: opt_value(&part, "metadata")? });
    }
    Ok(ToolContent::Parts(parts))
}

/// The `Event` an ag-ui event object holds.
pub fn event_from_python(obj: &Bound<'_, PyAny>) -> PyResult<Event> {
    no_extra(obj)?;
    let kind = text(obj, "type")?;
    let body = match kind.as_str() {
        "RUN_STARTED" => {
            if !attr(obj, "input")?.is_none() {
                return Err(PyTypeError::new_err("RUN_STARTED with an input"));
            }
            Body::RunStarted {
                thread_id: text(obj, "thread_id")?,
                run_id: text(obj, "run_id")?,
                protocol_version: opt_text(obj, "protocol_version")?,
                parent_run_id: opt_text(obj, "parent_run_id")?,
            }
        }
        "RUN_FINISHED" => Body::RunFinished {
            thread_id: text(obj, "thread_id")?,
            run_id: text(obj, "run_id")?,
            result: opt_value(obj, "result")?,
            outcome: run_outcome(obj)?,
            usage: usage(obj)?,
        },
        "RUN_ERROR" => {
            Body::RunError { message: text(obj, "message")?, code: opt_text(obj, "code")?, usage: usage(obj)? }
        }
        "TEXT_MESSAGE_START" => Body::TextMessageStart {
            message_id: text(obj, "message_id")?,
            role: opt_text(obj, "role")?,
            name: opt_text(obj, "name")?,
        },
        "TEXT_MESSAGE_CONTENT" => {
            Body::TextMessageContent { message_id: text(obj, "message_id")?, delta: text(obj, "delta")? }
        }
        "TEXT_MESSAGE_END" => Body::TextMessageEnd { message_id: text(obj, "message_id")? },
        "REASONING_MESSAGE_START" => {
            if text(obj, "role")? != "reasoning" {
                return Err(PyTypeError::new_err("a reasoning role other than 'reasoning'"));
            }
            Body::ReasoningMessageStart { message_id: text(obj, "message_id")? }
        }
        "REASONING_MESSAGE_CONTENT" => {
            Body::ReasoningMessageContent { message_id: text(obj, "message_id")?, delta: text(obj, "delta")? }
        }
        "REASONING_MESSAGE_END" => Body::ReasoningMessageEnd { message_id: text(obj, "message_id")? },
        "REASONING_ENCRYPTED_VALUE" => Body::ReasoningEncryptedValue {
            subtype: text(obj, "subtype")?,
            entity_id: text(obj, "entity_id")?,
            encrypted_value: text(obj, "encrypted_value")?,
        },
        "TOOL_CALL_START" => Body::ToolCallStart {
            tool_call_id: text(obj, "tool_call_id")?,
            tool_call_name: text(obj, "tool_call_name")?,
            parent_message_id: opt_text(obj, "parent_message_id")?,
        },
        "TOOL_CALL_ARGS" => Body::ToolCallArgs { tool_call_id: text(obj, "tool_call_id")?, delta: text(obj, "delta")? },
        "TOOL_CALL_END" => Body::ToolCallEnd { tool_call_id: text(obj, "tool_call_id")? },
        "TOOL_CALL_RESULT" => Body::ToolCallResult {
            message_id: text(obj, "message_id")?,
            tool_call_id: text(obj, "tool_call_id")?,
            content: tool_content(obj)?,
            role: opt_text(obj, "role")?,
        },
        "CUSTOM" => Body::Custom { name: text(obj, "name")?, value: to_value(&attr(obj, "value")?)? },
        "SUBAGENT_STARTED" => Body::SubagentStarted {
            name: text(obj, "name")?,
            description: opt_text(obj, "description")?,
            parent_subagent_run_id: opt_text(obj, "parent_subagent_run_id")?,
            parent_tool_call_id: opt_text(obj, "parent_tool_call_id")?,
            parent_message_id: opt_text(obj, "parent_message_id")?,
        },
        "SUBAGENT_FINISHED" => {
            let outcome = attr(obj, "outcome")?;
            let outcome = if outcome.is_none() {
                None
            } else {
                no_extra(&outcome)?;
                match text(&outcome, "type")?.as_str() {
                    "success" => Some(SubagentOutcome::Success),
                    other => return Err(PyTypeError::new_err(format!("unknown subagent outcome {other:?}"))),
                }
            };
            Body::SubagentFinished { result: opt_value(obj, "result")?, outcome }
        }
        "SUBAGENT_ERROR" => Body::SubagentError { message: text(obj, "message")?, code: opt_text(obj, "code")? },
        other => return Err(PyTypeError::new_err(format!("no native type for {other} events"))),
    };
    let subagent_run_id = if body.has_subagent_run_id() { opt_text(obj, "subagent_run_id")? } else { None };
    Ok(Event {
        timestamp: opt_int(obj, "timestamp")?,
        raw_event: opt_value(obj, "raw_event")?,
        metadata: opt_map(obj, "metadata")?,
        subagent_run_id,
        body,
    })
}
