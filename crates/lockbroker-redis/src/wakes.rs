//! Release announcements between brokers: one Pub/Sub subscription per
//! process, and the one reader of the message the scripts' `announce`
//! (`scripts/prelude.lua`) writes.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::{EventInterface, PubsubInterface};
use lockbroker_core::{LockName, Wake};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::sleep;

/// Keeps this process subscribed to the wake channel (once; fred subscribes
/// again after every reconnect) and turns announcements into [`Wake`]s.
pub async fn forward_wakes(
    subscriber: SubscriberClient,
    channel: String,
    broker_id: String,
    wakes: UnboundedSender<Wake>,
) {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    let _resubscribe = subscriber.manage_subscriptions();
    let mut backoff = Duration::from_millis(50);
    while subscriber.subscribe(channel.as_str()).await.is_err() {
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    loop {
        let wake = tokio::select! {
            message = messages.recv() => match message {
                Ok(message) => message.value.as_str().and_then(|text| parse_wake(&text, &broker_id)),
                // Announcements were dropped: every waiter looks again.
                Err(RecvError::Lagged(_)) => Some(Wake::Resync),
                Err(RecvError::Closed) => return,
            },
            reconnect = reconnects.recv() => match reconnect {
                // Releases announced while disconnected were missed.
                Ok(_) | Err(RecvError::Lagged(_)) => Some(Wake::Resync),
                Err(RecvError::Closed) => return,
            },
        };
        if let Some(wake) = wake {
            if wakes.send(wake).is_err() {
                return;
            }
        }
    }
}

/// Reads `<broker id> released|turn <lock name> <fair waiter id or ->`.
///
/// This broker's own releases already woke its local waiters, so from its
/// own announcement only the fair waiter named is woken.
pub fn parse_wake(text: &str, own_broker_id: &str) -> Option<Wake> {
    let mut parts = text.split(' ');
    let (origin, kind, name, head) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let next_fair = (head != "-").then(|| head.to_owned());
    match kind {
        "released" if origin != own_broker_id => Some(Wake::Released {
            name: LockName::parse(name).ok()?,
            next_fair,
        }),
        "released" | "turn" => next_fair.map(|waiter_id| Wake::Turn { waiter_id }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_read_as_wakes() {
        let name = LockName::parse("job").expect("valid");
        assert_eq!(
            parse_wake("b2 released job w7", "b1"),
            Some(Wake::Released {
                name,
                next_fair: Some("w7".into())
            })
        );
        assert_eq!(
            parse_wake("b1 released job w7", "b1"),
            Some(Wake::Turn {
                waiter_id: "w7".into()
            }),
            "from its own release a broker wakes only the fair waiter named"
        );
        assert_eq!(parse_wake("b1 released job -", "b1"), None);
        assert_eq!(
            parse_wake("b2 turn job w9", "b1"),
            Some(Wake::Turn {
                waiter_id: "w9".into()
            })
        );
        assert_eq!(parse_wake("b2 released", "b1"), None);
        assert_eq!(parse_wake("b2 renamed job w1", "b1"), None);
    }
}
