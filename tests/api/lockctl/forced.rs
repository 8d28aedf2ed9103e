//! `lockctl run` whose lease an operator force-releases: it stops the command
//! and exits as for a lost lease, saying which key id force-released it.

use std::time::Duration;

use lockbroker_tests::{RedisServer, TestApp};
use reqwest::StatusCode;

use super::{eventually, finish, in_dir, lockctl, stderr, Scratch, LEASE_LOST};

#[tokio::test]
async fn a_force_released_run_says_so_and_exits_79() {
    let redis = RedisServer::start();
    let app = TestApp::spawn(&redis).await;
    let scratch = Scratch::new();

    let mut command = lockctl(&app);
    command
        .args(["run", "job", "--ttl", "1s", "--", "sh", "-c"])
        .arg(in_dir(
            &scratch.0,
            "trap 'exit 0' TERM; touch started; while true; do sleep 0.05; done",
        ));
    let run = command.spawn().expect("spawn");
    eventually(Duration::from_secs(10), "the command to start", || {
        scratch.path("started").exists()
    })
    .await;

    let forced = app.send(app.http.delete(app.url("/v1/locks/job"))).await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.body);

    let run = finish(run).await;
    let said = stderr(&run);
    assert_eq!(run.status.code(), Some(LEASE_LOST), "{said}");
    assert!(
        said.contains("an operator force-released the lease (key id \"anonymous\")"),
        "{said}"
    );
    assert!(said.contains("was force-released by an operator"), "{said}");
}
