//! Loading settings from the file and the environment, end to end.

mod modes;

use std::path::{Path, PathBuf};

use super::*;

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A scratch directory of this test process, with `name` written into it.
fn scratch_file(dir: &str, name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lockbroker-{dir}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let file = dir.join(name);
    std::fs::write(&file, text).expect("write");
    file
}

#[test]
fn documented_config_file_matches_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/lockbroker.toml");
    let from_file = Settings::load(Some(&path), []).expect("config/lockbroker.toml loads");
    let defaults = Settings::default();
    assert_eq!(
        toml::Table::try_from(from_file).expect("serialize"),
        toml::Table::try_from(defaults).expect("serialize"),
    );
}

/// Every key appears in the documented file (deploy checks treat the keys
/// there as the known ones).
#[test]
fn the_documented_file_names_every_key() {
    fn keys(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (name, value) in table {
            match value {
                toml::Value::Table(inner) => keys(inner, &format!("{prefix}{name}."), out),
                _ => out.push(format!("{prefix}{name}")),
            }
        }
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/lockbroker.toml");
    let text = std::fs::read_to_string(path).expect("read");
    let (mut documented, mut known) = (Vec::new(), Vec::new());
    keys(&text.parse().expect("toml"), "", &mut documented);
    let defaults = toml::Table::try_from(Settings::default()).expect("serialize");
    keys(&defaults, "", &mut known);
    // A list of tables is documented by a commented-out example table.
    known.retain(|key| !text.contains(&format!("# [[{key}]]")));
    documented.sort();
    known.sort();
    assert_eq!(documented, known);
}

#[test]
fn environment_overrides_with_typed_values() {
    let settings = Settings::load(
        None,
        env(&[
            ("LOCKBROKER_LISTEN", "0.0.0.0:9000"),
            ("LOCKBROKER_AUTH_ALLOW_INSECURE", "true"),
            ("LOCKBROKER_REDIS_URL", "redis://10.0.0.1:6380/2"),
            ("LOCKBROKER_LOCKS_MAX_HOLD_MS", "7200000"),
            ("LOCKBROKER_METRICS_LISTEN", "127.0.0.1:9700"),
            ("PATH", "/bin"),
        ]),
    )
    .expect("loads");
    assert_eq!(settings.listen.port(), 9000);
    assert_eq!(settings.redis.url, "redis://10.0.0.1:6380/2");
    assert_eq!(settings.locks.max_hold_ms, Some(7_200_000));
    assert_eq!(settings.lock_policy().max_hold_ms, Some(7_200_000));
    assert_eq!(settings.metrics.listen, Some(([127, 0, 0, 1], 9700).into()));
}

#[test]
fn environment_secret_from_file() {
    let file = scratch_file("cfg", "url", "redis://:s3cret@127.0.0.1:6379/0\n");
    let settings = Settings::load(
        None,
        env(&[("LOCKBROKER_REDIS_URL_FILE", file.to_str().expect("utf-8"))]),
    )
    .expect("loads");
    assert_eq!(settings.redis.url, "redis://:s3cret@127.0.0.1:6379/0");
}

#[test]
fn bad_values_name_the_variable() {
    let err = Settings::load(None, env(&[("LOCKBROKER_REDIS_POOL_SIZE", "many")]))
        .expect_err("not a number");
    assert!(
        err.to_string().contains("LOCKBROKER_REDIS_POOL_SIZE"),
        "{err}"
    );
    let err = Settings::load(None, env(&[("LOCKBROKER_LISTEN", "nowhere")])).expect_err("bad addr");
    assert!(err.to_string().contains("invalid"), "{err}");
    let err = Settings::load(None, env(&[("LOCKBROKER_METRICS_LISTEN", "nowhere")]))
        .expect_err("bad metrics addr");
    let text = err.to_string();
    assert!(text.contains("LOCKBROKER_METRICS_LISTEN"), "{text}");
    assert!(text.contains("metrics.listen"), "{text}");
}

#[test]
fn an_unknown_variable_is_an_error_naming_it_and_the_nearest_setting() {
    let err = Settings::load(
        None,
        env(&[("LOCKBROKER_REDIS_URl", "redis://10.0.0.1:6379/0")]),
    )
    .expect_err("misspelt setting");
    assert_eq!(
        err.to_string(),
        "unknown setting LOCKBROKER_REDIS_URl; did you mean LOCKBROKER_REDIS_URL?"
    );
    let err = Settings::load(None, env(&[("LOCKBROKER_REDIS_PASWORD_FILE", "/run/x")]))
        .expect_err("misspelt secret file");
    assert!(
        err.to_string()
            .ends_with("did you mean LOCKBROKER_REDIS_PASSWORD_FILE?"),
        "{err}"
    );
    let err = Settings::load(None, env(&[("LOCKBROKER_ZZZ", "1")])).expect_err("unknown");
    let text = err.to_string();
    assert!(
        text.starts_with("unknown setting LOCKBROKER_ZZZ;"),
        "{text}"
    );
    assert!(!text.contains("did you mean"), "{text}");
}

#[test]
fn an_unknown_variable_never_shows_its_value() {
    let err = Settings::load(None, env(&[("LOCKBROKER_REDIS_PASSWROD", "s3cret")]))
        .expect_err("misspelt secret");
    let text = err.to_string();
    assert!(text.contains("LOCKBROKER_REDIS_PASSWROD"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn client_variables_in_the_same_environment_are_accepted() {
    let settings = Settings::load(
        None,
        env(&[
            ("LOCKBROKER_URL", "http://127.0.0.1:7700"),
            ("LOCKBROKER_API_KEY", "a-token"),
            ("LOCKBROKER_CA_CERT", "/etc/ssl/ca.pem"),
            ("LOCKBROKER_TOKEN", "a-lease-token"),
        ]),
    )
    .expect("client variables are not settings");
    assert_eq!(settings.redis.url, Settings::default().redis.url);
    for var in CLIENT_VARIABLES {
        Settings::load(None, env(&[(var, "x")])).expect(var);
    }
}

#[test]
fn an_empty_optional_value_in_the_environment_is_none() {
    let file = scratch_file(
        "cfg-empty",
        "set.toml",
        "[redis]\nusername = \"broker\"\npassword = \"file-s3cret\"\n\
         [metrics]\nlisten = \"127.0.0.1:9700\"\n[locks]\nmax_hold_ms = 5000\n",
    );
    let settings = Settings::load(Some(&file), []).expect("loads");
    assert_eq!(settings.redis.username.as_deref(), Some("broker"));
    assert_eq!(settings.redis.password.as_deref(), Some("file-s3cret"));
    assert_eq!(settings.locks.max_hold_ms, Some(5_000));
    let settings = Settings::load(
        Some(&file),
        env(&[
            ("LOCKBROKER_REDIS_PASSWORD", ""),
            ("LOCKBROKER_METRICS_LISTEN", ""),
            ("LOCKBROKER_HTTP_TLS_CERT_PATH", ""),
            ("LOCKBROKER_LOCKS_MAX_HOLD_MS", ""),
        ]),
    )
    .expect("loads");
    assert_eq!(settings.redis.username.as_deref(), Some("broker"));
    assert_eq!(settings.redis.password, None);
    assert_eq!(settings.metrics.listen, None);
    assert_eq!(settings.http.tls_files(), None);
    assert_eq!(settings.redis_settings().auth.password, None);
    assert_eq!(settings.locks.max_hold_ms, None);

    let err = Settings::load(None, env(&[("LOCKBROKER_REDIS_POOL_SIZE", "")]))
        .expect_err("a required number");
    assert!(
        err.to_string().contains("LOCKBROKER_REDIS_POOL_SIZE"),
        "{err}"
    );
}

#[test]
fn optional_values_read_from_the_file() {
    let file = scratch_file(
        "cfg-optional",
        "tls.toml",
        "[http]\ntls_cert_path = \"/etc/lockbroker/cert.pem\"\n\
         tls_key_path = \"/etc/lockbroker/key.pem\"\n\
         [redis]\ntls_ca_path = \"\"\n[locks]\nmax_hold_ms = 0\n",
    );
    let settings = Settings::load(Some(&file), []).expect("loads");
    let (cert, _) = settings.http.tls_files().expect("https");
    assert_eq!(cert, Path::new("/etc/lockbroker/cert.pem"));
    assert_eq!(settings.redis.tls_ca_path, None);
    assert_eq!(settings.locks.max_hold_ms, None);
}

#[test]
fn unknown_file_keys_are_rejected() {
    let file = scratch_file("cfg-unknown", "bad.toml", "[redis]\nurll = \"redis://x\"\n");
    let err = Settings::load(Some(&file), []).expect_err("unknown key");
    assert!(err.to_string().contains("urll"), "{err}");
}

#[test]
fn a_public_listener_needs_keys_or_an_explicit_opt_out() {
    let err = Settings::load(None, env(&[("LOCKBROKER_LISTEN", "0.0.0.0:7700")]))
        .expect_err("no keys beyond loopback");
    assert!(err.to_string().contains("allow_insecure"), "{err}");
    let keys = format!(
        r#"[{{id = "ops", sha256 = "{}", scopes = ["admin"], prefixes = ["*"]}}]"#,
        crate::auth::hash_token("secret")
    );
    let settings = Settings::load(
        None,
        env(&[
            ("LOCKBROKER_LISTEN", "[::]:7700"),
            ("LOCKBROKER_AUTH_KEYS", &keys),
        ]),
    )
    .expect("keys make it secure");
    assert!(settings.key_ring().expect("valid").enabled());
}

#[test]
fn keys_load_from_a_file_of_tables() {
    let text = format!(
        "[[keys]]\nid = \"worker\"\nsha256 = \"{}\"\nscopes = [\"lock\"]\nprefixes = [\"billing:\"]\nrate_limit_per_sec = 5\n",
        crate::auth::hash_token("worker-secret")
    );
    let file = scratch_file("keys", "keys.toml", &text);
    let settings = Settings::load(
        None,
        env(&[("LOCKBROKER_AUTH_KEYS_FILE", file.to_str().expect("utf-8"))]),
    )
    .expect("loads");
    assert_eq!(settings.auth.keys.len(), 1);
    assert_eq!(settings.auth.keys[0].rate_limit_per_sec, Some(5));
    let ring = settings.key_ring().expect("valid");
    assert!(ring.authenticate("worker-secret").is_some());
    assert!(ring.authenticate("worker-secre").is_none());

    std::fs::write(
        &file,
        "[[keys]]\nid = \"bad\"\nsha256 = \"0\"\nscopes = [\"lock\"]\nprefixes = [\"*\"]\n",
    )
    .expect("write");
    let err = Settings::load(
        None,
        env(&[("LOCKBROKER_AUTH_KEYS_FILE", file.to_str().expect("utf-8"))]),
    )
    .expect_err("bad hash");
    assert!(err.to_string().contains("sha256"), "{err}");
}

#[test]
fn debug_output_hides_redis_secrets() {
    let mut settings = Settings::default();
    settings.redis.url = "redis://:url-s3cret@10.0.0.1:6379/0".into();
    settings.redis.password = Some("field-s3cret".into());
    let text = format!("{settings:?}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn the_pool_is_one_connection_unless_steps_wait_for_replicas_or_a_size_is_set() {
    let pool = |pairs: &[(&str, &str)]| {
        Settings::load(None, env(pairs))
            .map(|settings| settings.redis_settings().pool_size)
            .map_err(|error| error.to_string())
    };
    assert_eq!(pool(&[]), Ok(1));
    let waits = [
        ("LOCKBROKER_REDIS_MODE", "sentinel"),
        ("LOCKBROKER_REDIS_SENTINELS", "127.0.0.1:26379"),
        ("LOCKBROKER_REDIS_SERVICE_NAME", "main"),
        ("LOCKBROKER_REDIS_MIN_REPLICAS_ACKED", "1"),
    ];
    assert_eq!(pool(&waits), Ok(4));
    assert_eq!(pool(&[("LOCKBROKER_REDIS_POOL_SIZE", "8")]), Ok(8));
    let too_many = pool(&[("LOCKBROKER_REDIS_POOL_SIZE", "65")]).expect_err("refused");
    assert!(too_many.contains("redis.pool_size"), "{too_many}");
}

#[test]
fn the_http2_stream_limit_comes_from_the_environment_and_is_at_least_one() {
    let settings = Settings::load(
        None,
        env(&[("LOCKBROKER_HTTP_MAX_STREAMS_PER_CONNECTION", "64")]),
    )
    .expect("loads");
    assert_eq!(settings.http.max_streams_per_connection, 64);
    let err = Settings::load(
        None,
        env(&[("LOCKBROKER_HTTP_MAX_STREAMS_PER_CONNECTION", "0")]),
    )
    .expect_err("no request at all per connection");
    assert!(
        err.to_string().contains("http.max_streams_per_connection"),
        "{err}"
    );
}
