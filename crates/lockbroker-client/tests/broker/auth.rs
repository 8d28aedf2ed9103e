//! API keys and TLS with a private CA.

use std::path::PathBuf;
use std::time::Duration;

use lockbroker_client::{Client, Error, TransportKind};
use lockbroker_server::auth::{hash_token, ApiKeyConfig, Scope};
use lockbroker_server::Application;
use lockbroker_tests::app::test_settings;
use lockbroker_tests::{RedisServer, TestApp};

use crate::with_ttl;

const WORKER: &str = "worker-key-3d9e51aa";
const BILLING: &str = "billing-key-8c2f07b1";

fn key(id: &str, secret: &str, prefixes: &[&str]) -> ApiKeyConfig {
    ApiKeyConfig {
        id: id.into(),
        sha256: hash_token(secret),
        scopes: vec![Scope::Lock],
        prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
        rate_limit_per_sec: None,
    }
}

#[tokio::test]
async fn the_api_key_is_sent_and_refusals_are_typed() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.auth.keys = vec![
        key("worker", WORKER, &["*"]),
        key("billing", BILLING, &["billing:"]),
    ];
    let app = TestApp::spawn_with(settings).await;
    let ttl = Duration::from_secs(5);

    let keyed = Client::builder(app.base.clone())
        .api_key(WORKER)
        .build()
        .expect("client");
    keyed
        .lock("job")
        .acquire(with_ttl(ttl, "w"))
        .await
        .expect("granted with the key");

    let without = Client::new(app.base.clone()).expect("client");
    let refused = without.lock("job2").acquire(with_ttl(ttl, "w")).await;
    assert!(
        matches!(refused, Err(Error::Unauthorized { .. })),
        "{refused:?}"
    );
    let wrong = Client::builder(app.base.clone())
        .api_key("not-a-key")
        .build()
        .expect("client");
    let refused = wrong.lock("job2").acquire(with_ttl(ttl, "w")).await;
    assert!(
        matches!(refused, Err(Error::Unauthorized { .. })),
        "{refused:?}"
    );

    let billing = Client::builder(app.base.clone())
        .api_key(BILLING)
        .build()
        .expect("client");
    billing
        .lock("billing:42")
        .acquire(with_ttl(ttl, "w"))
        .await
        .expect("its prefix");
    let outside = billing.lock("payroll").acquire(with_ttl(ttl, "w")).await;
    let Err(error @ Error::Forbidden { .. }) = outside else {
        panic!("a name outside the key's prefixes: {outside:?}");
    };
    assert!(!error.to_string().contains(BILLING), "{error}");
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tls")
        .join(name)
}

#[tokio::test]
async fn https_with_a_private_ca() {
    let redis = RedisServer::start();
    let mut settings = test_settings(&redis);
    settings.http.tls_cert_path = Some(fixture("server.pem"));
    settings.http.tls_key_path = Some(fixture("server.key"));
    let app = Application::build(settings).await.expect("broker starts");
    let base = format!("https://localhost:{}", app.local_addr().port());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));

    let ca = std::fs::read(fixture("ca.pem")).expect("CA fixture");
    let trusting = Client::builder(base.clone())
        .ca_pem(ca)
        .build()
        .expect("client");
    let mut granted = None;
    for _ in 0..100 {
        match trusting
            .lock("tls")
            .acquire(with_ttl(Duration::from_secs(5), "w"))
            .await
        {
            Ok(lease) => {
                granted = Some(lease);
                break;
            }
            Err(Error::Unavailable { .. } | Error::Transport { .. }) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    granted
        .expect("granted over https")
        .release()
        .await
        .expect("released");
    let http2 = Client::builder(base.clone())
        .ca_pem(std::fs::read(fixture("ca.pem")).expect("CA fixture"))
        .http2()
        .build()
        .expect("client");
    http2
        .lock("tls")
        .acquire(with_ttl(Duration::from_secs(5), "w"))
        .await
        .expect("granted over HTTP/2 and TLS")
        .release()
        .await
        .expect("released over HTTP/2 and TLS");

    let untrusting = Client::new(base).expect("client");
    let refused = untrusting
        .lock("tls")
        .acquire(with_ttl(Duration::from_secs(5), "w"))
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::Transport {
                kind: TransportKind::Tls,
                ..
            })
        ),
        "{refused:?}"
    );
    let _ = stop.send(());
    server.await.expect("server task").expect("clean shutdown");
}
