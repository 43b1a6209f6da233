//! Per-run conversion state (conversion-spec §1b.8): the request index, the open part cursors by index, and for a
//! stream's root its child runs' states and each run's thread. A `Draft` stages one item's changes to a run's state.

use crate::json::{Map, Value};

/// Where an open part stands; replaced, never changed in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub kind: CursorKind,
    pub part_id: String,
    pub tool_name: Option<String>,
    pub emitted_content: bool,
    pub emitted_signature: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorKind {
    Text,
    Reasoning,
    ToolCall,
}

impl CursorKind {
    pub fn name(self) -> &'static str {
        match self {
            CursorKind::Text => "text",
            CursorKind::Reasoning => "reasoning",
            CursorKind::ToolCall => "tool_call",
        }
    }

    /// The last word of a computed part id.
    pub fn suffix(self) -> &'static str {
        match self {
            CursorKind::Text => "text",
            CursorKind::Reasoning => "reasoning",
            CursorKind::ToolCall => "tool",
        }
    }

    pub fn from_name(name: &str) -> Option<CursorKind> {
        match name {
            "text" => Some(CursorKind::Text),
            "reasoning" => Some(CursorKind::Reasoning),
            "tool_call" => Some(CursorKind::ToolCall),
            _ => None,
        }
    }
}

impl Cursor {
    pub fn new(kind: CursorKind, part_id: String) -> Cursor {
        Cursor { kind, part_id, tool_name: None, emitted_content: false, emitted_signature: false }
    }
}

/// A part index: a JSON integer of any size (`Value::Int` or `Value::Big`), as Python's dict keys compare them.
pub type PartIndex = Value;

/// Python's `str()` of a part index or request index (`True`/`False` for the booleans a request index may hold).
pub fn python_str(value: &Value) -> String {
    match value {
        Value::Int(n) => n.to_string(),
        Value::Big(digits) => digits.to_string(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        other => format!("{other:?}"),
    }
}

/// One run's state. The root's also holds its children's states and the thread of every run seen.
#[derive(Clone, Debug, PartialEq)]
pub struct RunState {
    /// An integer (any size) or a boolean: a JSON `true` request index is kept as sent, as upstream keeps it.
    pub request_index: Value,
    pub parts: Vec<(PartIndex, Cursor)>,
    pub children: Vec<(String, RunState)>,
    pub threads: Vec<(String, String)>,
}

impl Default for RunState {
    fn default() -> Self {
        RunState { request_index: Value::Int(0), parts: Vec::new(), children: Vec::new(), threads: Vec::new() }
    }
}

impl RunState {
    pub fn thread_of(&self, run_id: &str) -> Option<&str> {
        self.threads.iter().find(|(run, _)| run == run_id).map(|(_, thread)| thread.as_str())
    }

    pub fn child(&self, run_id: &str) -> Option<&RunState> {
        self.children.iter().find(|(run, _)| run == run_id).map(|(_, state)| state)
    }

    pub fn child_mut(&mut self, run_id: &str) -> Option<&mut RunState> {
        self.children.iter_mut().find(|(run, _)| run == run_id).map(|(_, state)| state)
    }

    /// `state_data(state)`: the JSON data of its exported model.
    pub fn to_value(&self) -> Value {
        let mut parts = Map::with_capacity(self.parts.len());
        for (index, cursor) in &self.parts {
            let mut c = Map::with_capacity(5);
            c.push("kind", Value::str(cursor.kind.name()));
            c.push("part_id", Value::str(cursor.part_id.clone()));
            c.push("tool_name", cursor.tool_name.clone().map_or(Value::Null, Value::Str));
            c.push("emitted_content", Value::Bool(cursor.emitted_content));
            c.push("emitted_signature", Value::Bool(cursor.emitted_signature));
            parts.insert(python_str(index), Value::Object(c));
        }
        let mut out = Map::with_capacity(4);
        out.push("request_index", self.request_index.clone());
        out.push("parts", Value::Object(parts));
        out.push(
            "children",
            Value::Object(Map::from_entries(
                self.children.iter().map(|(run, s)| (run.clone().into(), s.to_value())).collect(),
            )),
        );
        out.push(
            "threads",
            Value::Object(Map::from_entries(
                self.threads.iter().map(|(run, thread)| (run.clone().into(), Value::str(thread.clone()))).collect(),
            )),
        );
        Value::Object(out)
    }

    /// `to_value()`'s compact JSON, written without building it.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use crate::json::write::{compact, joined, string};
        let distinct =
            self.parts.iter().enumerate().all(|(i, (index, _))| self.parts[..i].iter().all(|(o, _)| o != index));
        if !distinct {
            // A repeated index keeps its first place and its last cursor, as `to_value` builds it.
            return compact(out, &self.to_value());
        }
        out.extend_from_slice(b"{\"request_index\":");
        compact(out, &self.request_index);
        out.extend_from_slice(b",\"parts\":");
        joined(out, *b"{}", b",", &self.parts, |out, (index, cursor)| {
            string(out, &python_str(index));
            out.extend_from_slice(b":{\"kind\":");
            string(out, cursor.kind.name());
            out.extend_from_slice(b",\"part_id\":");
            string(out, &cursor.part_id);
            out.extend_from_slice(b",\"tool_name\":");
            match &cursor.tool_name {
                Some(name) => string(out, name),
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(if cursor.emitted_content {
                b",\"emitted_content\":true"
            } else {
                b",\"emitted_content\":false"
            });
            out.extend_from_slice(if cursor.emitted_signature {
                b",\"emitted_signature\":true}"
            } else {
                b",\"emitted_signature\":false}"
            });
        });
        out.extend_from_slice(b",\"children\":");
        joined(out, *b"{}", b",", &self.children, |out, (run, state)| {
            string(out, run);
            out.push(b':');
            state.write_json(out);
        });
        out.extend_from_slice(b",\"threads\":");
        joined(out, *b"{}", b",", &self.threads, |out, (run, thread)| {
            string(out, run);
            out.push(b':');
            string(out, thread);
        });
        out.push(b'}');
    }
}

/// Staged changes to one run's state: its request index, and its parts copied on the first change.
pub struct Draft<'a> {
    pub request_index: Value,
    base: &'a [(PartIndex, Cursor)],
    written: Option<Vec<(PartIndex, Cursor)>>,
}

/// A draft's changes, owned, until committed.
pub struct Changes {
    request_index: Value,
    parts: Option<Vec<(PartIndex, Cursor)>>,
}

impl<'a> Draft<'a> {
    pub fn of(state: &'a RunState) -> Draft<'a> {
        Draft { request_index: state.request_index.clone(), base: &state.parts, written: None }
    }

    /// The parts as staged: open cursors by index, in insertion order.
    pub fn parts(&self) -> &[(PartIndex, Cursor)] {
        self.written.as_deref().unwrap_or(self.base)
    }

    fn writable(&mut self) -> &mut Vec<(PartIndex, Cursor)> {
        let base = self.base;
        self.written.get_or_insert_with(|| base.to_vec())
    }

    pub fn get(&self, index: &PartIndex) -> Option<&Cursor> {
        self.parts().iter().find(|(i, _)| i == index).map(|(_, c)| c)
    }

    /// Set the cursor at `index`: an existing one is replaced in its place, a new one goes last.
    pub fn set(&mut self, index: &PartIndex, cursor: Cursor) {
        let parts = self.writable();
        match parts.iter_mut().find(|(i, _)| i == index) {
            Some(slot) => slot.1 = cursor,
            None => parts.push((index.clone(), cursor)),
        }
    }

    pub fn pop(&mut self, index: &PartIndex) -> Option<Cursor> {
        let at = self.parts().iter().position(|(i, _)| i == index)?;
        Some(self.writable().remove(at).1)
    }

    /// Close every part.
    pub fn clear(&mut self) {
        if !self.parts().is_empty() {
            self.written = Some(Vec::new());
        }
    }

    pub fn finish(self) -> Changes {
        Changes { request_index: self.request_index, parts: self.written }
    }
}

impl Changes {
    pub fn commit(self, state: &mut RunState) {
        state.request_index = self.request_index;
        if let Some(parts) = self.parts {
            state.parts = parts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::write::compact_bytes;

    fn written(state: &RunState) -> Vec<u8> {
        let mut out = Vec::new();
        state.write_json(&mut out);
        out
    }

    #[test]
    fn a_state_is_written_as_its_value_is() {
        let mut tool = Cursor::new(CursorKind::ToolCall, "p\"1".into());
        tool.tool_name = Some("search".into());
        tool.emitted_content = true;
        let mut child = RunState { request_index: Value::Bool(true), ..RunState::default() };
        child.parts.push((Value::Big("123456789012345678901234".into()), Cursor::new(CursorKind::Text, "t".into())));
        let mut state = RunState { request_index: Value::Int(3), ..RunState::default() };
        state.parts.push((Value::Int(0), tool));
        state.parts.push((Value::Int(-2), Cursor::new(CursorKind::Reasoning, "r\u{e9}".into())));
        state.children.push(("child".into(), child));
        state.threads.push(("child".into(), "thread \n".into()));
        assert_eq!(written(&state), compact_bytes(&state.to_value()));
        assert_eq!(written(&RunState::default()), compact_bytes(&RunState::default().to_value()));
        let repeated = Cursor::new(CursorKind::Text, "again".into());
        state.parts.push((Value::Int(0), repeated));
        assert_eq!(written(&state), compact_bytes(&state.to_value()));
    }
}
