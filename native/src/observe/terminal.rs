//! The terminal item of a run to RUN_FINISHED or RUN_ERROR (conversion-spec §1b.6).

use super::Refusal;
use crate::agui::{Body, Event, Interrupt, RunOutcome, TokenUsage};
use crate::json::{Map, Value};
use crate::wire::{Item, RunResult};

const CLIENT_TOOL: &str = "a13n.harness.client-tool";

/// A decimal integer's sign and digits (most significant first, no leading zeros; zero is `[0]`).
fn decimal(value: &Value) -> (bool, Vec<u8>) {
    let text = match value {
        Value::Int(n) => n.to_string(),
        Value::Big(digits) => digits.to_string(),
        _ => "0".to_owned(),
    };
    let negative = text.starts_with('-');
    let digits: Vec<u8> = text.trim_start_matches('-').bytes().map(|b| b - b'0').collect();
    (negative && digits != [0], digits)
}

fn magnitude_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn magnitude_add(a: &[u8], b: &[u8]) -> Vec<u8> {
    let (mut out, mut carry) = (Vec::with_capacity(a.len().max(b.len()) + 1), 0u8);
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 || j > 0 || carry > 0 {
        let mut sum = carry;
        if i > 0 {
            i -= 1;
            sum += a[i];
        }
        if j > 0 {
            j -= 1;
            sum += b[j];
        }
        out.push(sum % 10);
        carry = sum / 10;
    }
    out.reverse();
    out
}

/// `a - b` for magnitudes with `a >= b`.
fn magnitude_sub(a: &[u8], b: &[u8]) -> Vec<u8> {
    let (mut out, mut borrow) = (Vec::with_capacity(a.len()), 0i8);
    let mut j = b.len();
    for i in (0..a.len()).rev() {
        let mut digit = a[i] as i8 - borrow;
        if j > 0 {
            j -= 1;
            digit -= b[j] as i8;
        }
        borrow = i8::from(digit < 0);
        out.push((digit + 10 * borrow) as u8);
    }
    while out.len() > 1 && out.last() == Some(&0) {
        out.pop();
    }
    out.reverse();
    out
}

/// Python's `a + b` of two integers of any size.
pub fn int_add(a: &Value, b: &Value) -> Value {
    if let (Value::Int(x), Value::Int(y)) = (a, b) {
        if let Some(sum) = x.checked_add(*y) {
            return Value::Int(sum);
        }
    }
    let ((na, da), (nb, db)) = (decimal(a), decimal(b));
    let (negative, digits) = if na == nb {
        (na, magnitude_add(&da, &db))
    } else if magnitude_cmp(&da, &db).is_ge() {
        (na, magnitude_sub(&da, &db))
    } else {
        (nb, magnitude_sub(&db, &da))
    };
    let negative = negative && digits != [0];
    let text: String =
        (if negative { "-" } else { "" }).chars().chain(digits.iter().map(|d| char::from(b'0' + d))).collect();
    match text.parse::<i64>() {
        Ok(n) => Value::Int(n),
        Err(_) => Value::Big(text.into()),
    }
}

fn is_zero(value: &Value) -> bool {
    matches!(value, Value::Int(0))
}

/// The largest integer an AG-UI count or timestamp holds (2^53 - 1).
const SAFE_INTEGER: i64 = (1 << 53) - 1;

fn counts_ok(usage: &TokenUsage) -> bool {
    let fields = [
        &usage.input_tokens,
        &usage.output_tokens,
        &usage.total_tokens,
        &usage.reasoning_tokens,
        &usage.cached_input_tokens,
        &usage.cache_write_input_tokens,
    ];
    fields.into_iter().flatten().all(|n| matches!(n, Value::Int(i) if (0..=SAFE_INTEGER).contains(i)))
}

/// The TokenUsage model's fields, as the reference constructs it (for its refusal).
fn usage_data(usage: &TokenUsage) -> Value {
    let mut out = Map::with_capacity(6);
    let mut put = |name: &'static str, value: &Option<Value>| out.push(name, value.clone().unwrap_or(Value::Null));
    put("input_tokens", &usage.input_tokens);
    put("output_tokens", &usage.output_tokens);
    put("total_tokens", &usage.total_tokens);
    put("reasoning_tokens", &usage.reasoning_tokens);
    put("cached_input_tokens", &usage.cached_input_tokens);
    put("cache_write_input_tokens", &usage.cache_write_input_tokens);
    Value::Object(out)
}

fn usage(usage: &Map) -> Option<Vec<TokenUsage>> {
    let zero = Value::Int(0);
    let get = |key: &str| usage.get(key).unwrap_or(&zero);
    let (inputs, outputs) = (get("input_tokens"), get("output_tokens"));
    let (cache_read, cache_write) = (get("cache_read_tokens"), get("cache_write_tokens"));
    let total = int_add(inputs, outputs);
    if is_zero(&total) && is_zero(cache_read) && is_zero(cache_write) {
        return None;
    }
    let reasoning = usage.get("details").and_then(Value::as_object).and_then(|d| d.get("reasoning_tokens"));
    Some(vec![TokenUsage {
        input_tokens: Some(inputs.clone()),
        output_tokens: Some(outputs.clone()),
        total_tokens: Some(total),
        reasoning_tokens: reasoning.filter(|r| r.is_python_int()).cloned(),
        cached_input_tokens: Some(cache_read.clone()),
        cache_write_input_tokens: Some(cache_write.clone()),
        ..TokenUsage::default()
    }])
}

fn tool_name(call: &Map, metadata: Option<&Value>) -> Value {
    let marker = metadata.and_then(Value::as_object).and_then(|m| m.get(CLIENT_TOOL)).and_then(Value::as_object);
    match marker.and_then(|m| m.get("declared_name")) {
        Some(Value::Str(name)) if !name.is_empty() => Value::str(name.clone()),
        _ => call.get("tool_name").cloned().unwrap_or(Value::Null),
    }
}

fn interrupts(deferred: &Map) -> Vec<Interrupt> {
    let empty = Map::new();
    let metadata = deferred.get("metadata").and_then(Value::as_object).unwrap_or(&empty);
    let mut out = vec![];
    for (reason, group) in [("approval", "approvals"), ("external", "calls")] {
        for entry in deferred.get(group).and_then(Value::as_array).into_iter().flatten() {
            let Some(entry) = entry.as_object() else { continue };
            let target = entry.get("target_call").and_then(Value::as_object).unwrap_or(&empty);
            let target_id = target.get("tool_call_id").and_then(Value::as_str).unwrap_or_default();
            let tool_metadata = metadata.get(target_id);
            let model_call = entry.get("model_call").and_then(Value::as_object).unwrap_or(&empty);
            let name = if reason == "external" {
                tool_name(target, tool_metadata.filter(|m| m.truthy()))
            } else {
                target.get("tool_name").cloned().unwrap_or(Value::Null)
            };
            let mut data = Map::with_capacity(3);
            data.push("tool_name", name);
            data.push("args", target.get("args").cloned().unwrap_or(Value::Null));
            data.push("tool_metadata", tool_metadata.cloned().unwrap_or(Value::Null));
            out.push(Interrupt {
                subagent_run_id: None,
                id: target_id.to_owned(),
                reason: reason.to_owned(),
                message: None,
                tool_call_id: model_call.get("tool_call_id").and_then(Value::as_str).map(str::to_owned),
                response_schema: None,
                expires_at: None,
                metadata: Some(data),
            });
        }
    }
    out
}

/// RUN_FINISHED (success, interrupt, cancelled) or RUN_ERROR, with rawEvent naming the source item; refused as
/// the reference's models refuse what they cannot hold.
pub fn terminal_event(item: &Item, result: &RunResult, ts: i64) -> Result<Event, Refusal> {
    let usage = usage(&result.usage);
    if let Some(refused) = usage.iter().flatten().find(|u| !counts_ok(u)) {
        return Err(Refusal::Model { module: "ag_ui.core", class: "TokenUsage", data: usage_data(refused) });
    }
    let mut raw = Map::with_capacity(6);
    raw.push("thread_id", Value::str(item.thread_id.clone()));
    raw.push("run_id", Value::str(item.run_id.clone()));
    raw.push("sequence", item.sequence.clone());
    raw.push("occurred_at", Value::str(item.occurred_iso.clone()));
    raw.push("status", Value::str(result.status.clone()));
    let finished = |outcome: RunOutcome, result_value: Option<Value>, raw: Map| {
        let mut event = Event::new(
            ts,
            Body::RunFinished {
                thread_id: item.thread_id.clone(),
                run_id: item.run_id.clone(),
                result: result_value,
                outcome: Some(outcome),
                usage: usage.clone(),
            },
        );
        event.raw_event = Some(Value::Object(raw));
        event
    };
    Ok(match result.status.as_str() {
        "completed" => {
            let output = Some(result.output.clone()).filter(|o| !o.is_null());
            finished(RunOutcome::Success { pending_tool_call_ids: None }, output, raw)
        }
        "suspended" => {
            let empty = Map::new();
            let interrupts = interrupts(result.deferred.as_ref().unwrap_or(&empty));
            if interrupts.is_empty() {
                let mut data = Map::new();
                data.push("interrupts", Value::Array(vec![]));
                let data = Value::Object(data);
                return Err(Refusal::Model { module: "ag_ui.core.events", class: "RunFinishedInterruptOutcome", data });
            }
            finished(RunOutcome::Interrupt { interrupts }, None, raw)
        }
        "failed" => {
            let failure = result.failure.clone().unwrap_or_default();
            let text = |key: &str| failure.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
            let (message, code) = (text("message"), text("code"));
            raw.push("failure", Value::Object(failure));
            let mut event = Event::new(ts, Body::RunError { message, code: Some(code), usage: usage.clone() });
            event.raw_event = Some(Value::Object(raw));
            event
        }
        _ => finished(RunOutcome::Cancelled, None, raw),
    })
}

#[cfg(test)]
mod tests {
    use super::int_add;
    use crate::json::Value;

    #[test]
    fn integers_add_at_any_size() {
        let big = |s: &str| Value::Big(s.into());
        assert_eq!(int_add(&Value::Int(2), &Value::Int(3)), Value::Int(5));
        assert_eq!(int_add(&Value::Int(i64::MAX), &Value::Int(1)), big("9223372036854775808"));
        assert_eq!(int_add(&big("-9223372036854775809"), &Value::Int(1)), Value::Int(i64::MIN));
        assert_eq!(int_add(&big("100000000000000000000"), &big("-100000000000000000000")), Value::Int(0));
        assert_eq!(int_add(&big("-99999999999999999999"), &Value::Int(-1)), big("-100000000000000000000"));
        assert_eq!(int_add(&Value::Int(-5), &Value::Int(3)), Value::Int(-2));
    }
}
