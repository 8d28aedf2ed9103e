//! Durations on the command line: `500ms`, `30s`, `1.5s`, `1m30s`, `2h`.

use std::time::Duration;

const HINT: &str = "write it as e.g. 500ms, 1.5s, 30s, 1m30s or 2h";

/// Units from the largest down, with their length in milliseconds. `ms`
/// comes before `m` so that `500ms` is not read as 500 minutes and an `s`.
const UNITS: &[(&str, u128)] = &[("h", 3_600_000), ("ms", 1), ("m", 60_000), ("s", 1_000)];

/// Parses one or more `<number><unit>` parts, largest unit first, each unit
/// at most once (`1m30s`, `2h15m`); a number may have a fraction (`1.5s`).
/// Units are `h`, `m`, `s` and `ms`; a bare `0` is zero. A bare number is
/// refused (`30` could mean seconds or milliseconds), and so is anything finer
/// than a millisecond.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(format!("an empty duration; {HINT}"));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    // The rank of the last unit seen: each part must use a smaller unit.
    let mut last_rank: Option<u128> = None;
    while !rest.is_empty() {
        let (whole, fraction, after) =
            split_number(rest).ok_or_else(|| format!("{text:?} is not a duration; {HINT}"))?;
        let (unit, unit_ms) = UNITS
            .iter()
            .copied()
            .find(|(unit, _)| after.starts_with(unit))
            .ok_or_else(|| unit_error(text, after))?;
        if last_rank.is_some_and(|last| unit_ms >= last) {
            return Err(format!(
                "{text:?}: write the larger units first, each once (e.g. 1h30m, 1m30s); {HINT}"
            ));
        }
        last_rank = Some(unit_ms);
        total = total
            .checked_add(part_millis(text, whole, fraction, unit_ms)?)
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = &after[unit.len()..];
    }
    u64::try_from(total)
        .map(Duration::from_millis)
        .map_err(|_| format!("{text:?} is too long"))
}

/// Splits `12.5rest` into ("12", "5", "rest"); the fraction may be absent,
/// but a dot needs digits on both sides.
fn split_number(text: &str) -> Option<(&str, &str, &str)> {
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let whole_len = digits(text);
    if whole_len == 0 {
        return None;
    }
    let (whole, after) = text.split_at(whole_len);
    let Some(after_dot) = after.strip_prefix('.') else {
        return Some((whole, "", after));
    };
    let fraction_len = digits(after_dot);
    if fraction_len == 0 {
        return None;
    }
    let (fraction, after) = after_dot.split_at(fraction_len);
    Some((whole, fraction, after))
}

fn unit_error(text: &str, after: &str) -> String {
    if after.is_empty() {
        format!("{text:?} has no unit; {HINT}")
    } else {
        format!("{text:?} has an unknown unit; {HINT}")
    }
}

/// `whole.fraction` units in milliseconds, refusing sub-millisecond remainders.
fn part_millis(text: &str, whole: &str, fraction: &str, unit_ms: u128) -> Result<u128, String> {
    let too_long = || format!("{text:?} is too long");
    if whole.len() > 20 || fraction.len() > 20 {
        return Err(too_long());
    }
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let mut millis = whole.checked_mul(unit_ms).ok_or_else(too_long)?;
    if !fraction.is_empty() {
        let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(20));
        let numerator = fraction
            .parse::<u128>()
            .map_err(|_| too_long())?
            .checked_mul(unit_ms)
            .ok_or_else(too_long)?;
        if numerator % scale != 0 {
            return Err(format!("{text:?} is finer than a millisecond; {HINT}"));
        }
        millis += numerator / scale;
    }
    Ok(millis)
}

/// Milliseconds as the API wants them, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(n))
    }

    #[test]
    fn units() {
        assert_eq!(parse("500ms"), ms(500));
        assert_eq!(parse("30s"), ms(30_000));
        assert_eq!(parse("10m"), ms(600_000));
        assert_eq!(parse("2h"), ms(7_200_000));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn fractions() {
        assert_eq!(parse("1.5s"), ms(1_500));
        assert_eq!(parse("0.25s"), ms(250));
        assert_eq!(parse("1.5h"), ms(5_400_000));
        assert_eq!(parse("2.500s"), ms(2_500));
        assert_eq!(parse("1.0ms"), ms(1));
    }

    #[test]
    fn compounds() {
        assert_eq!(parse("1m30s"), ms(90_000));
        assert_eq!(parse("1h30m"), ms(5_400_000));
        assert_eq!(parse("2h15m10s"), ms(8_110_000));
        assert_eq!(parse("1s500ms"), ms(1_500));
        assert_eq!(parse("1m1.5s"), ms(61_500));
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "30",
            "s",
            "1.5",
            ".5s",
            "1.s",
            "1.5.5s",
            "-1s",
            "10 s",
            "1m 30s",
            "3d",
            "30s1m",
            "1m1m",
            "1.2345s",
            "0.5ms",
            "1m30",
            "99999999999999999999h",
            "18446744073709551616ms",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
