//! The decoding of stream messages: repeats a resume sends are left out.

use super::*;

fn reader() -> Reader {
    Reader {
        client: Client::new("http://127.0.0.1:1").expect("client"),
        path: "/v1/locks/a/events".into(),
        watched: Watched::Lock,
        idle_timeout: DEFAULT_IDLE_TIMEOUT,
        last_id: Arc::default(),
        newest: None,
        response: None,
        parser: Parser::default(),
        ready: VecDeque::new(),
        failures: 0,
        done: false,
    }
}

fn message(event: &str, id: Option<&str>, data: &str) -> Message {
    Message {
        event: event.into(),
        id: id.map(str::to_owned),
        data: data.into(),
    }
}

const CHANGE: &str = r#"{"name":"a","type":"acquired","mode":"exclusive","fence":7,
    "owner":null,"expires_in_ms":100,"expires_at_ms":null}"#;
const STATE: &str = r#"{"name":"a","held":false,"owner":null,"fence":null,
    "expires_in_ms":0,"available_in_ms":0,"mode":null,"holders":[],"holder_count":0,"waiting":0}"#;

#[test]
fn a_change_a_resume_repeats_is_left_out_until_a_state_resets_the_count() {
    let mut reader = reader();
    let first = reader.decode(message("acquired", Some("10"), CHANGE));
    assert!(matches!(first, Ok(Some(_))), "{first:?}");
    assert_eq!(reader.last_id.lock().expect("id").as_deref(), Some("10"));
    // The same id again, or an older one: a repeat.
    assert!(matches!(
        reader.decode(message("acquired", Some("10"), CHANGE)),
        Ok(None)
    ));
    assert!(matches!(
        reader.decode(message("acquired", Some("9"), CHANGE)),
        Ok(None)
    ));
    // A state (a restarted broker's, say) starts the count again.
    let state = reader.decode(message("state", None, STATE));
    assert!(
        matches!(
            state,
            Ok(Some(Event {
                kind: EventKind::State(_),
                ..
            }))
        ),
        "{state:?}"
    );
    assert!(matches!(
        reader.decode(message("acquired", Some("3"), CHANGE)),
        Ok(Some(_))
    ));
    // An unknown event type is skipped, not an error.
    assert!(matches!(
        reader.decode(message("future", None, "{}")),
        Ok(None)
    ));
    assert!(reader.decode(message("lagged", None, "[]")).is_err());
}
