//! `openapi.yaml` is the contract: it parses and lists exactly the served routes.

use std::collections::BTreeSet;

use lockbroker_server::http::served_routes;

#[test]
fn openapi_lists_exactly_the_routes_the_router_serves() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../openapi.yaml");
    let text = std::fs::read_to_string(path).expect("read openapi.yaml");
    let spec: serde_yaml::Value = serde_yaml::from_str(&text).expect("openapi.yaml parses");
    assert!(spec["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.")));

    let mut documented = BTreeSet::new();
    for (path, item) in spec["paths"].as_mapping().expect("paths") {
        let path = path.as_str().expect("path key");
        for (method, _) in item.as_mapping().expect("path item") {
            let method = method.as_str().expect("method key");
            if ["get", "post", "put", "patch", "delete", "head", "options"].contains(&method) {
                documented.insert((method.to_uppercase(), path.to_owned()));
            }
        }
    }
    let served: BTreeSet<(String, String)> = served_routes()
        .into_iter()
        .map(|(method, path)| (method.to_string(), path.to_owned()))
        .collect();

    assert_eq!(documented, served);
}
