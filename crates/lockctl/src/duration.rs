//! Durations on the command line: `500ms`, `30s`, `10m`, `2h`.

use std::time::Duration;

/// Parses `<digits><unit>` with unit `ms`, `s`, `m` or `h`; a bare `0` is zero.
/// A bare number is refused: `30` could mean seconds or milliseconds.
pub fn parse(text: &str) -> Result<Duration, String> {
    let hint = "write it as e.g. 500ms, 30s, 10m or 2h";
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit; {hint}"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; {hint}"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text:?} has an unknown unit; {hint}")),
    };
    number
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// Milliseconds as the API wants them, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "30",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "3d",
            "99999999999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
