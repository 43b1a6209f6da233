//! The terminal `result` of a run (conversion-spec §1a.3), its status and field combination checked.

use super::agent::decode_tool_call;
use super::fields::{get_int, get_obj, get_str, get_str_or_none, python_space, take_obj};
use super::{Decoded, Defer};
use crate::json::{Map, Value};

/// A terminal outcome whose status/field combination has been checked.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    pub status: String,
    pub usage: Map,
    pub output: Value,
    /// `{code, message, retry_hint, details}`, for a failed run.
    pub failure: Option<Map>,
    pub suspend_reason: Option<String>,
    /// The deferred calls of a suspended run, each call's `model_call` and `target_call` normalized.
    pub deferred: Option<Map>,
}

const USAGE_INTS: [&str; 12] = [
    "input_tokens",
    "cache_write_tokens",
    "cache_read_tokens",
    "output_tokens",
    "input_audio_tokens",
    "cache_audio_read_tokens",
    "output_audio_tokens",
    "requests",
    "tool_calls",
    "provider_receipts",
    "unknown_cost_records",
    "incomplete_requests",
];
const USAGE_OTHERS: [&str; 4] = ["audio_seconds", "cost", "details", "model_usage_coverage"];
const RETRY_HINTS: [&str; 3] = ["none", "new_run", "dependency_change"];

/// `[+-]?(digits[.digits?] | .digits)([eE][+-]?digits)?`, the whole text.
fn decimal_text(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let whole = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    i += whole;
    let mut fraction = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        fraction = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += fraction;
    }
    if whole == 0 && fraction == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exponent = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exponent == 0 {
            return false;
        }
        i += exponent;
    }
    i == b.len()
}

fn usage(result: &Map) -> Decoded<Map> {
    let usage = get_obj(result, "usage")?;
    if usage.keys().any(|k| !USAGE_INTS.contains(&k) && !USAGE_OTHERS.contains(&k)) {
        return Err(Defer);
    }
    for name in USAGE_INTS {
        if usage.contains_key(name) {
            get_int(usage, name)?;
        }
    }
    match usage.get("details") {
        None => {}
        Some(Value::Object(details)) if details.values().all(|n| matches!(n, Value::Int(_) | Value::Big(_))) => {}
        Some(_) => return Err(Defer),
    }
    for name in ["audio_seconds", "cost"] {
        match usage.get(name) {
            None => {}
            Some(Value::Null) if name == "cost" => {}
            Some(Value::Int(_) | Value::Big(_) | Value::Float(_)) => {}
            Some(Value::Str(text)) if decimal_text(text.trim_matches(python_space)) => {}
            Some(_) => return Err(Defer),
        }
    }
    match usage.get("model_usage_coverage") {
        None => {}
        Some(Value::Str(c)) if c == "all" || c == "responses_only" => {}
        Some(_) => return Err(Defer),
    }
    Ok(usage.clone())
}

fn failure(result: &Map) -> Decoded<Map> {
    let failure = get_obj(result, "failure")?;
    if failure.keys().any(|k| !matches!(k, "code" | "message" | "retry_hint" | "details")) {
        return Err(Defer);
    }
    let code = get_str(failure, "code")?;
    let message = get_str(failure, "message")?;
    if code.is_empty() || message.is_empty() {
        return Err(Defer);
    }
    let hint = match failure.get("retry_hint") {
        None => "none".to_owned(),
        Some(Value::Str(h)) if RETRY_HINTS.contains(&h.as_str()) => h.clone(),
        Some(_) => return Err(Defer),
    };
    let details = match failure.get("details") {
        None => Map::new(),
        Some(Value::Object(d)) => d.clone(),
        Some(_) => return Err(Defer),
    };
    let mut out = Map::with_capacity(4);
    out.push("code", Value::str(code));
    out.push("message", Value::str(message));
    out.push("retry_hint", Value::Str(hint));
    out.push("details", Value::Object(details));
    Ok(out)
}

fn must_be_null(status: &str) -> &'static [&'static str] {
    match status {
        "completed" => &["failure", "suspend_reason", "deferred"],
        "suspended" => &["output", "failure"],
        "failed" => &["output", "suspend_reason", "deferred"],
        _ => &["output", "failure", "suspend_reason", "deferred"],
    }
}

fn deferred(result: &Map) -> Decoded<Map> {
    let mut deferred = get_obj(result, "deferred")?.clone();
    for group in ["calls", "approvals"] {
        let Some(calls) = deferred.get(group) else { continue };
        let calls = calls.as_array().ok_or(Defer)?;
        let mut decoded = Vec::with_capacity(calls.len());
        for call in calls {
            let mut call = call.as_object().ok_or(Defer)?.clone();
            for side in ["model_call", "target_call"] {
                let part = decode_tool_call(Value::Object(take_obj(&mut call, side)?))?;
                call.insert(side, Value::Object(part));
            }
            get_str(&call, "target_identity")?;
            decoded.push(Value::Object(call));
        }
        deferred.insert(group, Value::Array(decoded));
    }
    match deferred.get("metadata") {
        None | Some(Value::Object(_)) => Ok(deferred),
        Some(_) => Err(Defer),
    }
}

/// The checked result of a terminal item.
pub fn decode_result(result: &Map) -> Decoded<RunResult> {
    let status = get_str(result, "status")?.to_owned();
    if !matches!(status.as_str(), "completed" | "suspended" | "failed" | "cancelled") {
        return Err(Defer);
    }
    if must_be_null(&status).iter().any(|name| !matches!(result.get(name), None | Some(Value::Null))) {
        return Err(Defer);
    }
    let usage = usage(result)?;
    let failure = if status == "failed" { Some(failure(result)?) } else { None };
    let suspend_reason = get_str_or_none(result, "suspend_reason")?.map(str::to_owned);
    let deferred = if status == "suspended" {
        if suspend_reason.as_deref() != Some("deferred") {
            return Err(Defer);
        }
        Some(deferred(result)?)
    } else {
        None
    };
    let output = result.get("output").cloned().unwrap_or(Value::Null);
    Ok(RunResult { status, usage, output, failure, suspend_reason, deferred })
}

#[cfg(test)]
mod tests {
    use super::decimal_text;

    #[test]
    fn decimal_text_is_the_references_pattern() {
        for good in ["1", "-1.5", "+.5", "1.", "1e5", "1.5E-3", "0"] {
            assert!(decimal_text(good), "{good}");
        }
        for bad in ["", ".", "e5", "1e", "1e+", "--1", "1.5.2", "0x10", "1 "] {
            assert!(!decimal_text(bad), "{bad}");
        }
    }
}
