//! The times an item keeps: an event's epoch-millisecond `timestamp` as a UTC datetime (`event_time`), written as
//! the reference writes it (`2025-06-01T12:00:00.800000Z`), or a restored datetime's text as its model wrote it.

use super::input::{EventRef, Field};
use super::Fault;
use crate::json::write::string;
use crate::json::Value;

/// A UTC time in milliseconds since the epoch, or the JSON string text of a datetime read back from an export.
#[derive(Clone, Debug, PartialEq)]
pub enum Time {
    Ms(i64),
    Text(Box<str>),
}

/// The milliseconds from the epoch to 0001-01-01 and to the end of 9999, Python's datetime range.
const MIN_MS: i64 = -62_135_596_800_000;
const MAX_MS: i64 = 253_402_300_799_999;
const DAY_MS: i64 = 86_400_000;

/// The event's own `timestamp` (any Python int, a boolean too) as a time; the epoch when it carries none. The
/// reference's datetime arithmetic refuses times outside the years 1 to 9999 with an OverflowError, as here.
pub fn event_time(event: EventRef<'_>) -> Result<Time, Fault> {
    match event.get("timestamp") {
        Some(Field::Int(ms)) => checked(ms),
        Some(Field::Value(Value::Int(ms))) => checked(*ms),
        Some(Field::Value(Value::Bool(b))) => Ok(Time::Ms(i64::from(*b))),
        Some(Field::Value(Value::Big(_))) => Err(overflow("Python int too large to convert to C int".to_owned())),
        _ => Ok(Time::Ms(0)),
    }
}

fn overflow(message: String) -> Fault {
    Fault::Python { kind: "OverflowError", message }
}

fn checked(ms: i64) -> Result<Time, Fault> {
    if (MIN_MS..=MAX_MS).contains(&ms) {
        return Ok(Time::Ms(ms));
    }
    let days = ms.div_euclid(DAY_MS);
    if i32::try_from(days).is_err() {
        return Err(overflow("Python int too large to convert to C int".to_owned()));
    }
    if days.abs() > 999_999_999 {
        return Err(overflow(format!("days={days}; must have magnitude <= 999999999")));
    }
    Err(overflow("date value out of range".to_owned()))
}

/// Year, month and day of a day count from 1970-01-01 (the proleptic Gregorian calendar).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn two(out: &mut Vec<u8>, n: i64) {
    out.push(b'0' + (n / 10) as u8);
    out.push(b'0' + (n % 10) as u8);
}

thread_local! {
    /// The text of the time written last, by its milliseconds (an event's items share its time).
    static LAST: std::cell::RefCell<(i64, Vec<u8>)> = const { std::cell::RefCell::new((i64::MIN, Vec::new())) };
}

/// The day count from 1970-01-01 of a date of the proleptic Gregorian calendar (`civil`'s inverse).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// The milliseconds of a time as `write` spells it (without the quotes), if it has that form.
fn ms_of(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let number = |from: usize, digits: usize| -> Option<i64> {
        let part = bytes.get(from..from + digits)?;
        part.iter().try_fold(0i64, |n, &b| b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0')))
    };
    let days = days_from_civil(number(0, 4)?, number(5, 2)?, number(8, 2)?);
    let seconds = number(11, 2)? * 3600 + number(14, 2)? * 60 + number(17, 2)?;
    let millis = if bytes.get(19) == Some(&b'.') { number(20, 3)? } else { 0 };
    Some(days * DAY_MS + seconds * 1000 + millis)
}

impl Time {
    /// A time read back from its text: held as its milliseconds when `write` spells those exactly so, else as the
    /// text itself.
    pub fn of_text(text: Box<str>) -> Time {
        if let Some(ms) = ms_of(&text).filter(|ms| (MIN_MS..=MAX_MS).contains(ms)) {
            let mut written = Vec::with_capacity(text.len() + 2);
            Time::write_ms(&mut written, ms);
            if written.get(1..written.len() - 1) == Some(text.as_bytes()) {
                return Time::Ms(ms);
            }
        }
        Time::Text(text)
    }

    /// The JSON string of the time (with its quotes).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Time::Text(text) => string(out, text),
            Time::Ms(ms) => LAST.with_borrow_mut(|(last, text)| {
                if *last != *ms {
                    text.clear();
                    Time::write_ms(text, *ms);
                    *last = *ms;
                }
                out.extend_from_slice(text);
            }),
        }
    }

    fn write_ms(out: &mut Vec<u8>, ms: i64) {
        let days = ms.div_euclid(DAY_MS);
        let rest = ms.rem_euclid(DAY_MS);
        let (year, month, day) = civil(days);
        out.push(b'"');
        two(out, year / 100);
        two(out, year % 100);
        out.push(b'-');
        two(out, month);
        out.push(b'-');
        two(out, day);
        out.push(b'T');
        let seconds = rest / 1000;
        two(out, seconds / 3600);
        out.push(b':');
        two(out, seconds / 60 % 60);
        out.push(b':');
        two(out, seconds % 60);
        let millis = rest % 1000;
        if millis != 0 {
            out.push(b'.');
            out.push(b'0' + (millis / 100) as u8);
            two(out, millis % 100);
            out.extend_from_slice(b"000");
        }
        out.extend_from_slice(b"Z\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(ms: i64) -> String {
        let mut out = Vec::new();
        Time::Ms(ms).write(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn times_are_written_as_the_reference_writes_them() {
        assert_eq!(text(0), "\"1970-01-01T00:00:00Z\"");
        assert_eq!(text(1_748_779_200_800), "\"2025-06-01T12:00:00.800000Z\"");
        assert_eq!(text(-1), "\"1969-12-31T23:59:59.999000Z\"");
        assert_eq!(text(MIN_MS), "\"0001-01-01T00:00:00Z\"");
        assert_eq!(text(MAX_MS), "\"9999-12-31T23:59:59.999000Z\"");
    }

    #[test]
    fn times_read_back_are_held_as_milliseconds_only_when_written_the_same() {
        for ms in [0, 1_748_779_200_800, -1, MIN_MS, MAX_MS, 951_782_400_000, 4_107_542_399_999] {
            let written = text(ms);
            assert_eq!(Time::of_text(written[1..written.len() - 1].into()), Time::Ms(ms), "{written}");
        }
        for kept in ["2025-06-01T12:00:00.800Z", "2025-06-01T12:00:00+00:00", "2025-02-30T00:00:00Z", "1970-01-01"] {
            assert_eq!(Time::of_text(kept.into()), Time::Text(kept.into()));
        }
    }

    #[test]
    fn times_outside_the_years_1_to_9999_overflow() {
        let at = |v: Value| event_time(EventRef::Map(&crate::json::Map::from_entries(vec![("timestamp".into(), v)])));
        assert!(matches!(at(Value::Int(MAX_MS + 1)), Err(Fault::Python { kind: "OverflowError", .. })));
        assert_eq!(at(Value::Bool(true)), Ok(Time::Ms(1)));
        assert_eq!(at(Value::str("1")), Ok(Time::Ms(0)));
    }
}
