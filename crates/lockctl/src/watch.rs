//! `lockctl watch`: print a lock's changes as they happen.
//!
//! The broker's event stream is read chunk by chunk ([`EventStream`]), each
//! event printed as one line, and a dropped stream reopened with the last
//! event's id so the broker resumes after it. Only SIGINT or SIGTERM, or a
//! refusal that asking again cannot mend, ends a watch once it has started.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cli::WatchArgs;
use crate::client::{Broker, EventStream, Message};
use crate::duration::millis;
use crate::exit;

/// The first pause before reconnecting; it doubles up to [`MAX_BACKOFF`]
/// and starts over once a stream delivers an event.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// The fields a line shows after the name, in order, and what it calls them.
const FIELDS: &[(&str, &str)] = &[
    ("held", "held"),
    ("fence", "fence"),
    ("owner", "owner"),
    ("mode", "mode"),
    ("expires_in_ms", "expires_in"),
    ("holder_count", "holders"),
    ("limit", "limit"),
    ("available", "available"),
    ("missed", "missed"),
];

/// `lockctl watch NAME`.
pub async fn watch(broker: &Broker, args: WatchArgs) -> u8 {
    let mut stop = match Stop::install() {
        Ok(stop) => stop,
        Err(error) => {
            eprintln!("lockctl: cannot handle signals: {error}");
            return exit::SOFTWARE;
        }
    };
    let watched = args.watched();
    let mut last_id: Option<String> = None;
    let mut backoff = FIRST_BACKOFF;
    // A stream has been open: from then on, transient failures are retried.
    let mut started = false;
    // A failure to reconnect has been reported: say so once it works again.
    let mut reported = false;
    loop {
        let opened = tokio::select! {
            opened = broker.events(watched, last_id.as_deref()) => opened,
            () = stop.recv() => return exit::OK,
        };
        match opened {
            Ok(mut stream) => {
                if reported {
                    eprintln!("lockctl: reconnected");
                    reported = false;
                }
                started = true;
                let cause = match follow(
                    &mut stream,
                    args.json,
                    &mut last_id,
                    &mut backoff,
                    &mut stop,
                )
                .await
                {
                    Ok(cause) => cause,
                    Err(code) => return code,
                };
                eprintln!("lockctl: {cause}; reconnecting");
            }
            Err(error) if started && error.is_transient() => {
                if !reported {
                    eprintln!(
                        "lockctl: cannot reconnect: {error}; trying again every {} ms at most",
                        millis(MAX_BACKOFF)
                    );
                    reported = true;
                }
                let pause = error.retry_after().unwrap_or(backoff).min(MAX_BACKOFF);
                backoff = backoff.max(pause);
            }
            Err(error) => {
                eprintln!("lockctl: {error}");
                return error.exit_code();
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.recv() => return exit::OK,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Prints the stream's events until it ends or drops (answering why), or
/// until interrupted or stdout is gone (answering the exit code).
async fn follow(
    stream: &mut EventStream<'_>,
    json: bool,
    last_id: &mut Option<String>,
    backoff: &mut Duration,
    stop: &mut Stop,
) -> Result<String, u8> {
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            () = stop.recv() => return Err(exit::OK),
        };
        let message = match next {
            Ok(Some(message)) => message,
            Ok(None) => return Ok("the broker ended the stream".to_owned()),
            Err(error) => return Ok(format!("the stream dropped: {error}")),
        };
        if message.id.is_some() {
            last_id.clone_from(&message.id);
        }
        *backoff = FIRST_BACKOFF;
        let Ok(Value::Object(data)) = serde_json::from_str::<Value>(&message.data) else {
            eprintln!(
                "lockctl: skipped a {:?} event whose data is not a JSON object",
                message.event
            );
            continue;
        };
        let line = if json {
            json_line(&message, data)
        } else {
            human_line(&utc(SystemTime::now()), &message.event, &data)
        };
        let mut out = std::io::stdout().lock();
        match writeln!(out, "{line}").and_then(|()| out.flush()) {
            Ok(()) => {}
            // The reader is gone (`lockctl watch x | head -1`): done.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Err(exit::OK),
            Err(error) => {
                eprintln!("lockctl: cannot print: {error}");
                return Err(exit::SOFTWARE);
            }
        }
    }
}

/// SIGINT and SIGTERM: either ends the watch.
struct Stop {
    interrupt: Signal,
    terminate: Signal,
}

impl Stop {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}

/// The event as `--json` prints it: its data with `type` and `id` added
/// (`id` as a number, as the broker counts them), and never a token.
fn json_line(message: &Message, mut data: Map<String, Value>) -> String {
    data.remove("token");
    data.insert("type".to_owned(), Value::from(message.event.clone()));
    if let Some(id) = &message.id {
        let id = id
            .parse::<u64>()
            .map_or_else(|_| Value::from(id.clone()), Value::from);
        data.insert("id".to_owned(), id);
    }
    Value::Object(data).to_string()
}

/// The event as a line: when it arrived, its type, the name (or the prefix
/// a prefix stream's state marker closes), then the lease's fields.
fn human_line(at: &str, event: &str, data: &Map<String, Value>) -> String {
    let mut line = format!("{at} {event}");
    match (data.get("name"), data.get("prefix")) {
        (Some(Value::String(name)), _) => {
            line.push(' ');
            line.push_str(&word(name));
        }
        (None, Some(Value::String(prefix))) => {
            line.push(' ');
            line.push_str(&word(prefix));
            if data.get("complete") == Some(&Value::Bool(true)) {
                line.push_str(" complete");
            }
        }
        _ => {}
    }
    for (key, shown) in FIELDS {
        let Some(value) = data.get(*key) else {
            continue;
        };
        let value = match value {
            Value::Null => "-".to_owned(),
            Value::String(text) => word(text),
            Value::Number(n) if key.ends_with("_ms") => {
                n.as_u64().map_or_else(|| n.to_string(), seconds)
            }
            other => other.to_string(),
        };
        line.push_str(&format!(" {shown}={value}"));
    }
    line
}

/// A name or owner as one word: as it is if plainly so, else JSON-quoted.
fn word(text: &str) -> String {
    let plain = |c: char| !c.is_whitespace() && !c.is_control() && c != '"' && c != '=';
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        Value::from(text).to_string()
    }
}

/// Milliseconds as seconds: `29.998s`, `0.5s`, `30s`.
fn seconds(ms: u64) -> String {
    let (whole, rest) = (ms / 1000, ms % 1000);
    if rest == 0 {
        format!("{whole}s")
    } else {
        format!("{whole}.{}s", format!("{rest:03}").trim_end_matches('0'))
    }
}

/// A time as UTC in RFC 3339 with milliseconds: `2026-12-01T17:00:00.123Z`.
fn utc(time: SystemTime) -> String {
    let ms = time.duration_since(UNIX_EPOCH).map_or(0, millis);
    let (days, of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1000 % 60,
        of_day % 1000
    )
}

/// Days since 1970-01-01 as (year, month, day) in the Gregorian calendar
/// (Howard Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const AT: &str = "2026-12-01T17:00:00.123Z";

    fn data(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_change_reads_as_one_line() {
        let acquired = data(
            json!({"name": "billing:42", "type": "acquired", "mode": "exclusive",
            "fence": 1_795_954_817_685_497_u64, "owner": "worker-1", "expires_in_ms": 29_998,
            "expires_at_ms": 1_795_954_847_685_u64}),
        );
        assert_eq!(
            human_line(AT, "acquired", &acquired),
            "2026-12-01T17:00:00.123Z acquired billing:42 fence=1795954817685497 \
             owner=worker-1 mode=exclusive expires_in=29.998s"
        );
        let released = data(
            json!({"name": "billing:42", "type": "released", "mode": "shared",
            "fence": 7, "owner": null, "expires_in_ms": 0, "expires_at_ms": null}),
        );
        assert_eq!(
            human_line(AT, "released", &released),
            format!("{AT} released billing:42 fence=7 owner=- mode=shared expires_in=0s")
        );
    }

    #[test]
    fn states_markers_and_lags_read_as_lines_too() {
        let state = data(
            json!({"name": "job", "held": true, "mode": "shared", "fence": 9,
            "owner": null, "expires_in_ms": 1500, "available_in_ms": 1500,
            "holders": [{"owner": "a b", "fence": 8}], "holder_count": 2}),
        );
        assert_eq!(
            human_line(AT, "state", &state),
            format!(
                "{AT} state job held=true fence=9 owner=- mode=shared expires_in=1.5s holders=2"
            )
        );
        let marker = data(json!({"prefix": "billing:", "complete": true}));
        assert_eq!(
            human_line(AT, "state", &marker),
            format!("{AT} state billing: complete")
        );
        let everything = data(json!({"prefix": "", "complete": true}));
        assert_eq!(
            human_line(AT, "state", &everything),
            format!("{AT} state \"\" complete")
        );
        let lagged = data(json!({"missed": 12}));
        assert_eq!(
            human_line(AT, "lagged", &lagged),
            format!("{AT} lagged missed=12")
        );
        let odd_owner = data(json!({"name": "job", "owner": "host 1 \"x\""}));
        assert_eq!(
            human_line(AT, "extended", &odd_owner),
            format!("{AT} extended job owner=\"host 1 \\\"x\\\"\"")
        );
    }

    #[test]
    fn json_adds_type_and_id_and_never_a_token() {
        let message = Message {
            event: "acquired".to_owned(),
            id: Some("42".to_owned()),
            data: String::new(),
        };
        let line = json_line(
            &message,
            data(json!({"name": "job", "fence": 3, "token": "t"})),
        );
        let printed: Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(
            printed,
            json!({"name": "job", "fence": 3, "type": "acquired", "id": 42})
        );
    }

    #[test]
    fn times_print_in_utc_with_milliseconds() {
        let at = |ms: u64| utc(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_796_144_400_123), AT);
        assert_eq!(at(1_709_251_199_999), "2024-02-29T23:59:59.999Z");
        assert_eq!(at(951_868_800_000), "2000-03-01T00:00:00.000Z");
        assert_eq!(seconds(30_000), "30s");
        assert_eq!(seconds(500), "0.5s");
        assert_eq!(seconds(1_050), "1.05s");
    }
}
