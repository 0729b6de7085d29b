//! Points in time on the command line: RFC 3339 (`2026-11-22T10:00:00Z`), a date
//! (`2026-11-22`, midnight UTC), or an age (`90s`, `15m`, `2h`, `7d`: that long ago).

use chrono::{DateTime, Duration, NaiveDate, Utc};

/// Parse `text` relative to `now` (passed in, so tests need no clock).
pub fn parse_time(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()).unwrap_or(now));
    }
    let age = parse_age(text).map_err(|e| {
        if e.contains("the unit must be") {
            e
        } else {
            format!("{text:?} is not a time: use RFC 3339, YYYY-MM-DD, or an age like 15m, 2h, 7d")
        }
    })?;
    Ok(now - age)
}

/// An age or a period: `90s`, `15m`, `2h`, `7d`.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().map_err(|_| {
        format!("{text:?} is not an age: use a number and a unit, like 15m, 2h, 7d")
    })?;
    match unit {
        "s" => Duration::try_seconds(n),
        "m" => Duration::try_minutes(n),
        "h" => Duration::try_hours(n),
        "d" => Duration::try_days(n),
        _ => None,
    }
    .ok_or_else(|| format!("{text:?}: the unit must be s, m, h or d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        let now = DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            parse_time("2026-11-20T08:30:00+01:00", now)
                .unwrap()
                .to_rfc3339(),
            "2026-11-20T07:30:00+00:00"
        );
        assert_eq!(
            parse_time("2026-11-21", now).unwrap().to_rfc3339(),
            "2026-11-21T00:00:00+00:00"
        );
        assert_eq!(parse_time("90s", now).unwrap(), now - Duration::seconds(90));
        assert_eq!(parse_time("2h", now).unwrap(), now - Duration::hours(2));
        assert_eq!(parse_time("7d", now).unwrap(), now - Duration::days(7));
    }

    #[test]
    fn says_what_is_wrong() {
        let now = Utc::now();
        assert!(
            parse_time("yesterday", now)
                .unwrap_err()
                .contains("is not a time")
        );
        assert!(parse_time("5w", now).unwrap_err().contains("unit must be"));
        assert!(parse_age("soon").unwrap_err().contains("is not an age"));
        assert!(
            parse_age("2026-11-21")
                .unwrap_err()
                .contains("unit must be")
        );
        assert_eq!(parse_age("15m"), Ok(Duration::minutes(15)));
    }
}
