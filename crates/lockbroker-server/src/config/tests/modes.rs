//! Each backend mode's settings: what it needs, what it refuses.

use super::super::*;
use super::env;

#[test]
fn quorum_mode_takes_an_odd_number_of_distinct_nodes() {
    let quorum = |nodes: &str| {
        Settings::load(
            None,
            env(&[
                ("LOCKBROKER_REDIS_MODE", "quorum"),
                ("LOCKBROKER_REDIS_NODES", nodes),
            ]),
        )
    };
    let settings = quorum("redis://a:6379/0, redis://b:6379/0,redis://c:7000/2")
        .expect("three nodes, comma-separated");
    let nodes = settings.quorum_settings().expect("quorum mode").nodes;
    let urls: Vec<&str> = nodes.iter().map(|n| n.url.as_str()).collect();
    assert_eq!(
        urls,
        ["redis://a:6379/0", "redis://b:6379/0", "redis://c:7000/2"]
    );
    assert_eq!(nodes[0].command_timeout.as_millis(), 50, "the node timeout");
    assert!(
        quorum(r#"["redis://a", "redis://b", "redis://c"]"#).is_ok(),
        "a TOML list"
    );

    for (nodes, problem) in [
        ("redis://a,redis://b", "at least 3"),
        ("redis://a,redis://b,redis://c,redis://d", "odd number"),
        ("redis://a:6379/0,redis://b,redis://a:6379/1", "same server"),
        (
            "redis://localhost:7000,redis://b,redis://127.0.0.1:7000",
            "same server",
        ),
        ("redis://a,http://b,redis://c", "not a redis://"),
    ] {
        let err = quorum(nodes).expect_err(nodes).to_string();
        assert!(err.contains(problem), "{nodes}: {err}");
    }
    let single = Settings::load(
        None,
        env(&[("LOCKBROKER_REDIS_NODES", "redis://a,redis://b,redis://c")]),
    )
    .expect_err("nodes without quorum mode");
    assert!(single.to_string().contains("redis.mode"), "{single}");
    assert!(Settings::default().quorum_settings().is_none());
}

#[test]
fn sentinel_mode_takes_sentinels_and_a_service_name() {
    let sentinel = |vars: &[(&str, &str)]| {
        let mut all = vec![("LOCKBROKER_REDIS_MODE", "sentinel")];
        all.extend_from_slice(vars);
        Settings::load(None, env(&all))
    };
    let settings = sentinel(&[
        (
            "LOCKBROKER_REDIS_SENTINELS",
            "s1:26379, s2:26380,[::1]:26381",
        ),
        ("LOCKBROKER_REDIS_SERVICE_NAME", "locks"),
        ("LOCKBROKER_REDIS_SENTINEL_PASSWORD", "sentinel-s3cret"),
    ])
    .expect("three Sentinels, comma-separated");
    let found = settings.redis_settings().sentinel.expect("sentinel mode");
    assert_eq!(
        found.hosts,
        [
            ("s1".to_owned(), 26379),
            ("s2".to_owned(), 26380),
            ("::1".to_owned(), 26381)
        ]
    );
    assert_eq!(found.service_name, "locks");
    assert_eq!(found.auth.password.as_deref(), Some("sentinel-s3cret"));
    assert!(!format!("{settings:?}").contains("s3cret"), "redacted");
    assert!(settings.quorum_settings().is_none());
    assert_eq!(
        sentinel(&[("LOCKBROKER_REDIS_SENTINELS", "s1:26379")])
            .expect("the service name defaults")
            .redis
            .service_name,
        "mymaster"
    );

    for (vars, problem) in [
        (vec![], "at least one Sentinel"),
        (
            vec![("LOCKBROKER_REDIS_SENTINELS", "s1:26379,s2")],
            "Sentinel 2 is not host:port",
        ),
        (
            vec![
                ("LOCKBROKER_REDIS_SENTINELS", "s1:26379"),
                ("LOCKBROKER_REDIS_SERVICE_NAME", " "),
            ],
            "redis.service_name",
        ),
        (
            vec![
                ("LOCKBROKER_REDIS_SENTINELS", "s1:26379"),
                ("LOCKBROKER_REDIS_NODES", "redis://a,redis://b,redis://c"),
            ],
            "redis.nodes",
        ),
    ] {
        let err = sentinel(&vars).expect_err(problem).to_string();
        assert!(err.contains(problem), "{vars:?}: {err}");
    }
    let single = Settings::load(None, env(&[("LOCKBROKER_REDIS_SENTINELS", "s1:26379")]))
        .expect_err("Sentinels without sentinel mode");
    assert!(single.to_string().contains("redis.mode"), "{single}");
    assert!(Settings::default().redis_settings().sentinel.is_none());
}

#[test]
fn replica_acknowledgement_is_for_primaries_with_replicas_within_the_command_timeout() {
    let load = |vars: &[(&str, &str)]| Settings::load(None, env(vars));
    let settings = load(&[("LOCKBROKER_REDIS_MIN_REPLICAS_ACKED", "1")]).expect("single mode");
    let ack = settings.redis_settings().replica_ack.expect("waits");
    assert_eq!((ack.replicas, ack.timeout.as_millis()), (1, 100));
    assert!(Settings::default().redis_settings().replica_ack.is_none());

    let quorum = load(&[
        ("LOCKBROKER_REDIS_MODE", "quorum"),
        ("LOCKBROKER_REDIS_NODES", "redis://a,redis://b,redis://c"),
        ("LOCKBROKER_REDIS_MIN_REPLICAS_ACKED", "1"),
    ])
    .expect_err("quorum mode does not wait for replicas");
    assert!(
        quorum.to_string().contains("redis.min_replicas_acked"),
        "{quorum}"
    );
    let slow = load(&[
        ("LOCKBROKER_REDIS_MIN_REPLICAS_ACKED", "1"),
        ("LOCKBROKER_REDIS_REPLICA_ACK_TIMEOUT_MS", "1000"),
    ])
    .expect_err("as long as the command timeout");
    assert!(
        slow.to_string().contains("redis.replica_ack_timeout_ms"),
        "{slow}"
    );
}

#[test]
fn cluster_mode_takes_seed_nodes_of_database_0() {
    let cluster = |nodes: &str| {
        Settings::load(
            None,
            env(&[
                ("LOCKBROKER_REDIS_MODE", "cluster"),
                ("LOCKBROKER_REDIS_NODES", nodes),
            ]),
        )
    };
    let settings =
        cluster("redis://:s3cret@h1:7000, redis://h2:7001/0").expect("two seeds, comma-separated");
    let redis = settings.redis_settings();
    let seeds = redis.cluster.expect("cluster mode").seeds;
    assert_eq!(seeds, [("h1".to_owned(), 7000), ("h2".to_owned(), 7001)]);
    assert_eq!(
        redis.url, "redis://:s3cret@h1:7000",
        "the first seed's credentials and TLS apply"
    );
    assert!(settings.quorum_settings().is_none(), "not a quorum");
    assert!(cluster("redis://h1:7000").is_ok(), "one seed is enough");
    for (nodes, problem) in [
        ("", "at least one seed"),
        ("redis://h1:7000/2", "database 2"),
        ("redis://h1:7000,h2:7001", "seed node 2 is not"),
    ] {
        let err = cluster(nodes).expect_err(nodes).to_string();
        assert!(err.contains(problem), "{nodes:?}: {err}");
    }
    assert!(Settings::default().redis_settings().cluster.is_none());
}
