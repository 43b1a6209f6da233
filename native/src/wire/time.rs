//! Datetimes in their common spelling, `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)`, read as the reference reads them
//! (`datetime.fromisoformat`), with the three forms it derives: `isoformat()`, pydantic's JSON form, and the
//! milliseconds of `int(dt.timestamp() * 1000)` in its float arithmetic. Any other spelling (numbers, a space for
//! `T`, naive datetimes, other fraction lengths) is not handled here.

/// A datetime with a fixed UTC offset, fields as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moment {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micro: u32,
    /// Offset east of UTC, in minutes.
    offset: i32,
}

fn digits(bytes: &[u8], at: usize, count: usize) -> Option<u32> {
    let mut value = 0u32;
    for &b in bytes.get(at..at + count)? {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u32::from(b - b'0');
    }
    Some(value)
}

/// The last `count` decimal digits of `value`, zero-padded (`value` has at most `count` digits where it is used).
fn push_digits(out: &mut String, value: u32, count: u32) {
    let mut scale = 10u32.pow(count - 1);
    while scale > 0 {
        out.push(char::from(b'0' + (value / scale % 10) as u8));
        scale /= 10;
    }
}

fn leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn month_days(year: i64, month: u32) -> u32 {
    match month {
        2 if leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

impl Moment {
    /// The moment a canonical text names, or None when the text is not in that spelling or a field is out of range.
    pub fn parse(text: &str) -> Option<Moment> {
        let b = text.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
            return None;
        }
        let mut at = 19;
        let mut micro = 0;
        if b.get(at) == Some(&b'.') {
            micro = digits(b, at + 1, 6)?;
            at += 7;
        }
        let offset = match b.get(at)? {
            b'Z' if b.len() == at + 1 => 0,
            sign @ (b'+' | b'-') if b.len() == at + 6 && b[at + 3] == b':' => {
                let hours = digits(b, at + 1, 2)?;
                let minutes = digits(b, at + 4, 2)?;
                if hours > 23 || minutes > 59 {
                    return None;
                }
                let total = (hours * 60 + minutes) as i32;
                if *sign == b'-' {
                    -total
                } else {
                    total
                }
            }
            _ => return None,
        };
        let moment = Moment {
            year: i64::from(digits(b, 0, 4)?),
            month: digits(b, 5, 2)?,
            day: digits(b, 8, 2)?,
            hour: digits(b, 11, 2)?,
            minute: digits(b, 14, 2)?,
            second: digits(b, 17, 2)?,
            micro,
            offset,
        };
        let valid = moment.year >= 1
            && (1..=12).contains(&moment.month)
            && moment.day >= 1
            && moment.day <= month_days(moment.year, moment.month)
            && moment.hour < 24
            && moment.minute < 60
            && moment.second < 60;
        valid.then_some(moment)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.ffffff]` into `out`, written digit by digit (the year is 1 to 9999, four digits).
    fn civil_into(&self, out: &mut String) {
        let year = self.year as u32;
        push_digits(out, year, 4);
        out.push('-');
        push_digits(out, self.month, 2);
        out.push('-');
        push_digits(out, self.day, 2);
        out.push('T');
        push_digits(out, self.hour, 2);
        out.push(':');
        push_digits(out, self.minute, 2);
        out.push(':');
        push_digits(out, self.second, 2);
        if self.micro != 0 {
            out.push('.');
            push_digits(out, self.micro, 6);
        }
    }

    fn offset_into(&self, out: &mut String) {
        out.push(if self.offset < 0 { '-' } else { '+' });
        let minutes = self.offset.unsigned_abs();
        push_digits(out, minutes / 60, 2);
        out.push(':');
        push_digits(out, minutes % 60, 2);
    }

    /// Python's `isoformat()`: the offset always as `±HH:MM` (UTC `+00:00`), the fraction only when non-zero.
    pub fn isoformat(&self) -> String {
        let mut out = String::with_capacity(32);
        self.civil_into(&mut out);
        self.offset_into(&mut out);
        out
    }

    /// pydantic's JSON form: UTC as `Z`, other offsets kept, the fraction only when non-zero.
    pub fn pydantic_json(&self) -> String {
        let mut out = String::with_capacity(32);
        self.civil_into(&mut out);
        if self.offset == 0 {
            out.push('Z');
        } else {
            self.offset_into(&mut out);
        }
        out
    }

    /// Microseconds since the epoch.
    pub fn epoch_micros(&self) -> i64 {
        let days = days_from_civil(self.year, self.month, self.day);
        let seconds =
            days * 86_400 + i64::from(self.hour * 3600 + self.minute * 60 + self.second) - i64::from(self.offset) * 60;
        seconds * 1_000_000 + i64::from(self.micro)
    }

    /// `int(dt.timestamp() * 1000)` as the reference computes it: microseconds over 1e6 (correctly rounded), times
    /// 1000 in doubles, truncated toward zero; None beyond 2^53 microseconds, where the double division would not
    /// be the exact quotient Python's integer division rounds.
    pub fn timestamp_ms(&self) -> Option<i64> {
        let micros = self.epoch_micros();
        if micros.unsigned_abs() > (1u64 << 53) {
            return None;
        }
        Some(((micros as f64 / 1e6) * 1000.0).trunc() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_milliseconds_match_the_reference() {
        let m = Moment::parse("2025-06-01T12:00:00.100000Z").unwrap();
        assert_eq!(m.isoformat(), "2025-06-01T12:00:00.100000+00:00");
        assert_eq!(m.pydantic_json(), "2025-06-01T12:00:00.100000Z");
        assert_eq!(m.timestamp_ms(), Some(1748779200100));
        let m = Moment::parse("2025-06-01T12:00:00.000000-00:00").unwrap();
        assert_eq!(m.isoformat(), "2025-06-01T12:00:00+00:00");
        assert_eq!(m.pydantic_json(), "2025-06-01T12:00:00Z");
        let m = Moment::parse("2025-06-01T12:00:00+05:30").unwrap();
        assert_eq!(m.isoformat(), "2025-06-01T12:00:00+05:30");
        assert_eq!(m.timestamp_ms(), Some(1748779200000 - 330 * 60_000));
        let m = Moment::parse("0001-01-02T03:04:05.000060-09:07").unwrap();
        assert_eq!(m.isoformat(), "0001-01-02T03:04:05.000060-09:07");
        assert_eq!(m.pydantic_json(), "0001-01-02T03:04:05.000060-09:07");
        // The float arithmetic's known 1 ms low (conversion-spec §1e.1).
        assert_eq!(Moment::parse("2038-08-27T08:17:58.101000Z").unwrap().timestamp_ms(), Some(2166509878100));
        assert_eq!(Moment::parse("1969-12-31T23:59:59.999500Z").unwrap().timestamp_ms(), Some(0));
        for bad in [
            "2025-02-29T00:00:00Z",
            "2025-06-01T24:00:00Z",
            "2025-06-01T12:00:00",
            "2025-06-01 12:00:00Z",
            "2025-06-01T12:00:00.1Z",
            "0000-01-01T00:00:00Z",
            "2025-06-01T12:00:00+24:00",
        ] {
            assert_eq!(Moment::parse(bad), None, "{bad}");
        }
    }
}
